//! The console's static files, embedded in the binary: the vendored bpmn-js viewer
//! (`server/assets/bpmn-js/`, version and licence in its README) and the console's own
//! stylesheet and script. They are served under `/console/assets/<version>/<file>`, where
//! the version is a hash of their content, with a one-year `immutable` cache: a new
//! binary with changed files has a new path, so a browser never mixes old and new.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "bpmn-viewer.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/bpmn-js/bpmn-viewer.production.min.js"),
    },
    Asset {
        name: "diagram-js.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/bpmn-js/diagram-js.css"),
    },
    Asset {
        name: "bpmn-js.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/bpmn-js/bpmn-js.css"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/console.css"),
    },
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/console.js"),
    },
];

/// The first 16 hex digits of the SHA-256 over every asset's name and content.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let mut hash = Sha256::new();
    for asset in ASSETS {
        hash.update(asset.name.as_bytes());
        hash.update((asset.bytes.len() as u64).to_le_bytes());
        hash.update(asset.bytes);
    }
    hex::encode(&hash.finalize()[..8])
});

/// The path a page links an asset by.
pub fn href(name: &str) -> String {
    debug_assert!(ASSETS.iter().any(|a| a.name == name), "no asset {name}");
    format!("/console/assets/{}/{name}", VERSION.as_str())
}

/// Serves one asset; any other version or name is a 404.
pub async fn serve(Path((version, name)): Path<(String, String)>) -> Response {
    let found = ASSETS.iter().find(|a| a.name == name);
    match found {
        Some(asset) if version == *VERSION => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(asset.content_type),
                ),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=31536000, immutable"),
                ),
            ],
            asset.bytes,
        )
            .into_response(),
        _ => (
            StatusCode::NOT_FOUND,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            "no such asset\n",
        )
            .into_response(),
    }
}
