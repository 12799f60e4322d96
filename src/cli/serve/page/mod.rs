//! The web view: one page, its script and its style, embedded at build time (no node
//! toolchain, no CDN, no font from elsewhere: it works offline). The page takes its
//! token from its own URL and sends it with every request.

use super::http::Response;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// The page, its script and style named with the token (a browser sends no header of
/// ours when it loads them, and every request needs the token).
pub(super) fn index(token: &str) -> Response {
    let page = INDEX
        .replace("\"app.js\"", &format!("\"app.js?token={token}\""))
        .replace("\"app.css\"", &format!("\"app.css?token={token}\""));
    Response { status: 200, content_type: "text/html; charset=utf-8", body: page.into(), headers: Vec::new() }
}

/// `app.js` or `app.css`.
pub(super) fn asset(name: &str) -> Option<Response> {
    let (content_type, body) = match name {
        "app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "app.css" => ("text/css; charset=utf-8", STYLE),
        _ => return None,
    };
    Some(Response { status: 200, content_type, body: body.into(), headers: Vec::new() })
}
