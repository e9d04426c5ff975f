//! The control plane: E2B's REST API (`/sandboxes`, `/v2/sandboxes`, …) over the sandbox
//! registry in [`store`].
//!
//! Every route except `GET /health` and the volume content API (`/volumecontent/…`,
//! authorized by a volume's bearer token) requires `X-API-KEY`; errors are always
//! `{"code": <status>, "message": …}`. Snapshots, fork and volumes live in [`snapshots`],
//! [`volumes`] and [`volume_content`].

pub(crate) mod error;
pub(crate) mod handlers;
pub(crate) mod ids;
pub(crate) mod list;
pub(crate) mod snapshot_store;
pub(crate) mod snapshots;
pub(crate) mod store;
pub(crate) mod volume_content;
pub(crate) mod volume_store;
pub(crate) mod volumes;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use e2b_proto::headers;

use error::ApiErr;
use store::Store;

/// The API key every control-plane call must carry.
#[derive(Clone)]
struct ApiKey(Arc<str>);

async fn require_api_key(State(key): State<ApiKey>, req: Request, next: Next) -> Response {
    if req.method() == Method::GET && req.uri().path() == "/health" {
        return next.run(req).await;
    }
    // The volume content API checks the volume's own bearer token instead.
    if req.uri().path().starts_with("/volumecontent/") {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(headers::API_KEY)
        .and_then(|v| v.to_str().ok());
    if given != Some(&*key.0) {
        return ApiErr::unauthorized().into_response();
    }
    next.run(req).await
}

async fn no_route() -> ApiErr {
    ApiErr::new(StatusCode::NOT_FOUND, "no matching operation was found")
}

async fn no_method() -> ApiErr {
    ApiErr::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}

/// The control-plane router.
pub(crate) fn router(store: Arc<Store>, api_key: &str) -> Router {
    use handlers as h;
    Router::new()
        .route("/health", get(h::health))
        .route("/sandboxes", post(h::create_v1).get(list::list_v1))
        .route("/v2/sandboxes", post(h::create_v2).get(list::list_v2))
        .route("/sandboxes/metrics", get(h::metrics_many))
        .route("/sandboxes/{id}", get(h::info).delete(h::kill))
        .route("/sandboxes/{id}/timeout", post(h::set_timeout))
        .route("/sandboxes/{id}/refreshes", post(h::refresh))
        .route("/sandboxes/{id}/pause", post(h::pause))
        .route("/sandboxes/{id}/connect", post(h::connect_v1))
        .route("/v2/sandboxes/{id}/connect", post(h::connect_v2))
        .route("/sandboxes/{id}/resume", post(h::resume))
        .route("/sandboxes/{id}/metrics", get(h::metrics))
        .route("/sandboxes/{id}/logs", get(h::logs_v1))
        .route("/sandboxes/{id}/network", put(h::update_network))
        .route("/v2/sandboxes/{id}/logs", get(h::logs_v2))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/snapshots", get(snapshots::list))
        .route("/templates/{id}", delete(snapshots::delete_template))
        .route("/volumes", get(volumes::list).post(volumes::create))
        .route("/volumes/{id}", get(volumes::get).delete(volumes::delete))
        .route(
            "/volumecontent/{id}/dir",
            get(volume_content::list_dir).post(volume_content::make_dir),
        )
        .route(
            "/volumecontent/{id}/file",
            get(volume_content::read_file).put(volume_content::write_file),
        )
        .route(
            "/volumecontent/{id}/path",
            get(volume_content::stat)
                .delete(volume_content::remove)
                .patch(volume_content::update),
        )
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .with_state(store)
        .layer(middleware::from_fn_with_state(
            ApiKey(Arc::from(api_key)),
            require_api_key,
        ))
}
