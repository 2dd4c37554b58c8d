//! The origin the emulator writes into the URLs it hands out (upload part URLs, batch output
//! URLs, lens session endpoints). A client reaches the emulator at the address it was given,
//! which is not always the one the emulator bound: `--host 0.0.0.0` in a container behind a
//! port mapping, another interface, a name such as `localhost`. So each request's own `Host`
//! is the origin of the URLs its answer gives, as object stores and their emulators do; a
//! request without a usable `Host` gets the bound address (see `super::origin`).

use std::future::Future;
use std::str::FromStr;

use axum::http::uri::Authority;
use axum::http::{header, HeaderMap};

use super::state::Shared;

tokio::task_local! {
    static REQUEST_ORIGIN: String;
}

/// `http://<Host>` of a request whose `Host` is a plain `host[:port]` (no user part).
pub(crate) fn of_request(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let authority = Authority::from_str(host).ok()?;
    (!authority.as_str().contains('@')).then(|| format!("http://{authority}"))
}

/// Runs `work` (the router's handling of one request) with `origin` as the URLs' origin.
pub(crate) async fn within<F: Future>(origin: Option<String>, work: F) -> F::Output {
    match origin {
        Some(origin) => REQUEST_ORIGIN.scope(origin, work).await,
        None => work.await,
    }
}

/// The origin for URLs handed out now: the current request's, else the bound address.
pub(crate) fn current(shared: &Shared) -> String {
    REQUEST_ORIGIN.try_with(Clone::clone).unwrap_or_else(|_| shared.storage_origin.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_plain_host_is_the_origin_and_anything_else_is_not() {
        let origin = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            of_request(&headers)
        };
        assert_eq!(origin("localhost:8080").as_deref(), Some("http://localhost:8080"));
        assert_eq!(origin("[::1]:9").as_deref(), Some("http://[::1]:9"));
        assert_eq!(origin("emulator"), Some("http://emulator".to_string()));
        for bad in ["user@evil:1", "a b", "host/path", ""] {
            assert_eq!(origin(bad), None, "{bad:?}");
        }
        assert_eq!(of_request(&HeaderMap::new()), None);
    }
}
