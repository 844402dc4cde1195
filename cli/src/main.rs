//! The `qflow` binary.

fn main() {
    eprintln!("qflow: no commands yet");
    std::process::exit(2);
}
