//! CORS as envd configures `rs/cors`: any origin, methods HEAD/GET/POST/PUT/PATCH/DELETE,
//! any request header, Connect and a few plain headers exposed, preflight max-age 2 h,
//! `Vary: Origin` on every response.

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

const ALLOWED_METHODS: [&str; 6] = ["HEAD", "GET", "POST", "PUT", "PATCH", "DELETE"];
const EXPOSED: &str = "Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Location, Cache-Control, X-Content-Type-Options";

/// Middleware: answer preflights, decorate actual responses.
pub(crate) async fn middleware(req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let preflight_method = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.to_ascii_uppercase());
    if req.method() == Method::OPTIONS
        && let Some(method) = preflight_method
    {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        for v in [
            "Origin",
            "Access-Control-Request-Method",
            "Access-Control-Request-Headers",
        ] {
            h.append(header::VARY, HeaderValue::from_static(v));
        }
        if origin.is_some() && ALLOWED_METHODS.contains(&method.as_str()) {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            if let Ok(v) = HeaderValue::from_str(&method) {
                h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
            }
            if let Some(hdrs) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
                h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, hdrs.clone());
            }
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("7200"),
            );
        }
        return resp;
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    if origin.is_some() {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
    }
    resp
}
