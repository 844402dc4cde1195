//! Reproducers for loader problems found by fuzzing and benchmarking, one test each,
//! kept forever so a fix cannot silently regress.
//!
//! Each test states what went wrong and which input shape triggers it. The tests assert
//! outcomes (a verdict with labelled diagnostics), never timings; a regression of a
//! complexity bug shows up as a test that takes minutes instead of milliseconds.

use qflow_loader::{load, Diagnostic, LoadOptions};

fn assert_labelled(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        assert!(d.pos.line > 0, "{d:?}");
        assert!(!d.message.is_empty(), "{d:?}");
    }
}

/// Found by the loader benchmark (2,000-task synthetic model at 7 MB/s): appending text
/// to an element re-trimmed all the text accumulated so far, so an element with n
/// whitespace-separated children cost O(n²) — about four minutes for 1.3 MB of
/// `<documentation/>` children in a debug build, and hours near the 16 MiB size limit.
/// A hostile file could stall a deploy that way. Now linear: this input is 1 MB.
#[test]
fn many_whitespace_separated_children_do_not_make_parsing_quadratic() {
    let children = 60_000;
    let mut xml = String::from(
        r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d"><process id="p" isExecutable="true">"#,
    );
    for _ in 0..children {
        xml.push_str("\n  <documentation/>");
    }
    xml.push_str("\n</process></definitions>");
    match load(xml.as_bytes(), &LoadOptions::default()) {
        Ok(loaded) => assert_labelled(&loaded.warnings),
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty());
            assert_labelled(&diagnostics);
        }
    }
}

/// The same shape with real content after the whitespace: the first non-blank text
/// still decides the text position (the fix must not change what is reported).
#[test]
fn text_position_is_the_first_non_blank_character_after_leading_whitespace() {
    let xml = "<definitions xmlns=\"http://www.omg.org/spec/BPMN/20100524/MODEL\" id=\"d\">\n\
<process id=\"p\" isExecutable=\"true\">\n\
  <startEvent id=\"s\"/>\n\
  <sequenceFlow id=\"f1\" sourceRef=\"s\" targetRef=\"g\"/>\n\
  <exclusiveGateway id=\"g\" default=\"f3\"/>\n\
  <sequenceFlow id=\"f2\" sourceRef=\"g\" targetRef=\"e\">\n\
    <conditionExpression>\n\
\n\
        x ==\n\
    </conditionExpression>\n\
  </sequenceFlow>\n\
  <sequenceFlow id=\"f3\" sourceRef=\"g\" targetRef=\"e\"/>\n\
  <endEvent id=\"e\"/>\n\
</process></definitions>";
    let diagnostics =
        load(xml.as_bytes(), &LoadOptions::default()).expect_err("`x ==` is not a CEL expression");
    let bad = diagnostics
        .iter()
        .find(|d| d.code == "Q201")
        .unwrap_or_else(|| panic!("a CEL diagnostic: {diagnostics:?}"));
    // The expression starts on line 9 (after two blank lines), never on the line of the
    // <conditionExpression> tag.
    assert_eq!(bad.pos.line, 9, "{bad:?}");
}
