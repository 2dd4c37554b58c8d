//! Which proxy a connection goes through: the environment's proxy variables, read when a
//! connection pool is built, with loopback never proxied.
//!
//! The variables are curl's (and Python requests'): `HTTPS_PROXY` for https:// (and wss://)
//! URLs, `HTTP_PROXY` for http:// (and ws://), `ALL_PROXY` for either when its own is unset, and
//! `NO_PROXY`, the hosts that go direct; each upper or lower case, the upper first. A proxy is an
//! `http://`, `https://`, `socks4(a)://` or `socks5(h)://` URL, with `user:password@` if it asks
//! for them. Under CGI (`REQUEST_METHOD` set) none is used: there `HTTP_PROXY` comes from a
//! request's `Proxy:` header (httpoxy).
//!
//! A loopback destination (127.0.0.0/8, ::1, `localhost`) always goes direct, whatever the
//! variables say, as in Go's net/http: a proxy's loopback is not the caller's, so through one a
//! request to the embedded emulator could only fail (naming the proxy's answer, not the
//! emulator), after handing the proxy the API key.
//!
//! HTTP requests (reqwest) and the lens WebSocket (`client::websocket`) route by the same rules,
//! and an error on a proxied connection names the proxy (never its credentials).

use std::fmt;
use std::sync::Arc;

use hyper_util::client::proxy::matcher::Matcher;

/// Every variable the rules are read from (`Proxies::from_variables` asks for no other).
pub const VARIABLES: [&str; 9] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "REQUEST_METHOD",
];

/// Always direct, added to whatever `NO_PROXY` holds.
const LOOPBACK: &str = "127.0.0.0/8,::1,localhost";

/// The proxy rules of one connection pool.
#[derive(Clone)]
pub struct Proxies(Arc<Rules>);

struct Rules {
    /// The variable the proxy of http:// URLs comes from, and its value.
    http: Option<(&'static str, String)>,
    /// The same for https:// URLs.
    https: Option<(&'static str, String)>,
    /// `NO_PROXY` with loopback added.
    direct: String,
    matcher: Matcher,
}

/// Where a connection to some URL goes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The variable the proxy was found in.
    pub variable: &'static str,
    /// The proxy's URL without its credentials: `http://proxy.corp:3128`.
    pub proxy: String,
    /// The proxy's URI as the connectors take it (no credentials).
    pub uri: http::Uri,
    /// `user:password` of a SOCKS proxy.
    pub socks_auth: Option<(String, String)>,
    /// `Proxy-Authorization` for an HTTP proxy (marked sensitive).
    pub basic_auth: Option<http::HeaderValue>,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the proxy {} (from {})", self.proxy, self.variable)
    }
}

impl Proxies {
    /// The rules in the process's environment now.
    pub fn from_env() -> Proxies {
        Proxies::from_variables(|name| std::env::var(name).ok())
    }

    /// No proxy at all.
    #[cfg(test)]
    pub fn none() -> Proxies {
        Proxies::from_variables(|_| None)
    }

    pub fn from_variables(get: impl Fn(&str) -> Option<String>) -> Proxies {
        let cgi = get("REQUEST_METHOD").is_some();
        let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let proxy = |names: [&'static str; 2]| {
            names.into_iter().filter(|_| !cgi).find_map(|name| {
                let value = set(name)?;
                let url = normalised(&value);
                if url.is_none() {
                    // Never the value: it may hold a password.
                    log::warn!("{name} is not an http(s):// or socks:// proxy URL; it is ignored");
                }
                url.map(|url| (name, url))
            })
        };
        let all = proxy(["ALL_PROXY", "all_proxy"]);
        let http = proxy(["HTTP_PROXY", "http_proxy"]).or_else(|| all.clone());
        let https = proxy(["HTTPS_PROXY", "https_proxy"]).or(all);
        let direct = match set("NO_PROXY").or_else(|| set("no_proxy")) {
            Some(listed) => format!("{listed},{LOOPBACK}"),
            None => LOOPBACK.to_string(),
        };
        let value = |proxy: &Option<(&str, String)>| proxy.as_ref().map(|(_, v)| v.clone()).unwrap_or_default();
        let matcher = Matcher::builder().http(value(&http)).https(value(&https)).no(direct.clone()).build();
        Proxies(Arc::new(Rules { http, https, direct, matcher }))
    }

    /// `builder` set to route by these rules (and not by its own reading of the environment,
    /// which knows nothing of loopback).
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        let rules = &self.0;
        let mut builder = builder.no_proxy();
        let direct = || reqwest::NoProxy::from_string(&rules.direct);
        type Make = fn(&str) -> reqwest::Result<reqwest::Proxy>;
        let proxies: [(_, Make); 2] = [(&rules.http, |url| reqwest::Proxy::http(url)), (&rules.https, |url| reqwest::Proxy::https(url))];
        for (proxy, make) in proxies {
            // `normalised` already took what reqwest takes.
            if let Some(Ok(proxy)) = proxy.as_ref().map(|(_, url)| make(url)) {
                builder = builder.proxy(proxy.no_proxy(direct()));
            }
        }
        builder
    }

    /// The proxy a connection to `url` goes through, if any. `ws://` and `wss://` URLs go as
    /// `http://` and `https://` ones do.
    pub fn route(&self, url: &str) -> Option<Route> {
        let (scheme, rest) = url.split_once("://")?;
        let (scheme, proxy) = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => ("http", &self.0.http),
            "https" | "wss" => ("https", &self.0.https),
            _ => return None,
        };
        let uri: http::Uri = format!("{scheme}://{rest}").parse().ok()?;
        let intercept = self.0.matcher.intercept(&uri)?;
        let variable = proxy.as_ref().map_or("ALL_PROXY", |(variable, _)| *variable);
        let uri = intercept.uri().clone();
        let proxy = format!("{}://{}", uri.scheme_str().unwrap_or("http"), uri.authority().map_or("", |a| a.as_str()));
        let socks_auth = intercept.raw_auth().map(|(user, password)| (user.to_string(), password.to_string()));
        let basic_auth = intercept.basic_auth().cloned();
        Some(Route { variable, proxy, uri, socks_auth, basic_auth })
    }
}

/// A proxy variable's value as a URL both reqwest and the socket's connectors read alike: a
/// value without a scheme is an http:// proxy, and a SOCKS proxy without a port listens on 1080
/// (as curl and reqwest have it). `None` for anything else.
fn normalised(value: &str) -> Option<String> {
    let value = value.trim();
    let url = if value.contains("://") { value.to_string() } else { format!("http://{value}") };
    let mut url = url::Url::parse(&url).ok()?;
    let socks = matches!(url.scheme(), "socks4" | "socks4a" | "socks5" | "socks5h");
    if !(socks || matches!(url.scheme(), "http" | "https")) || url.host_str().is_none_or(str::is_empty) {
        return None;
    }
    if socks && url.port().is_none() {
        url.set_port(Some(1080)).ok()?;
    }
    Some(url.into())
}

impl fmt::Debug for Proxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The variables' names only: their values may hold passwords.
        let named = |proxy: &Option<(&'static str, String)>| proxy.as_ref().map(|(variable, _)| *variable);
        f.debug_struct("Proxies").field("http", &named(&self.0.http)).field("https", &named(&self.0.https)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(variables: &[(&str, &str)]) -> Proxies {
        let variables: Vec<(String, String)> = variables.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Proxies::from_variables(move |name| variables.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    fn proxy_of(proxies: &Proxies, url: &str) -> Option<String> {
        proxies.route(url).map(|route| route.to_string())
    }

    #[test]
    fn loopback_goes_direct_whatever_the_variables_say() {
        for variables in [
            &[("HTTP_PROXY", "http://proxy:3128"), ("HTTPS_PROXY", "http://proxy:3128")][..],
            &[("http_proxy", "http://proxy:3128"), ("https_proxy", "http://proxy:3128")],
            &[("ALL_PROXY", "socks5h://proxy:1080")],
            &[("ALL_PROXY", "socks5h://proxy:1080"), ("NO_PROXY", "example.com")],
        ] {
            let proxies = with(variables);
            for url in ["http://127.0.0.1:8000/v0.5", "https://127.9.8.7/", "http://[::1]:80/x", "ws://localhost:9/s", "http://LOCALHOST"] {
                assert_eq!(proxy_of(&proxies, url), None, "{url} with {variables:?}");
            }
            assert!(proxy_of(&proxies, "http://api.example.org/v0.5").is_some(), "{variables:?}");
        }
    }

    #[test]
    fn each_scheme_takes_its_own_variable_then_all_proxy_and_no_proxy_is_honoured() {
        let proxies = with(&[
            ("HTTPS_PROXY", "http://secure:1"),
            ("http_proxy", "http://plain:2"),
            ("ALL_PROXY", "socks5://sock:3"),
            ("NO_PROXY", ".internal, 10.0.0.0/8"),
        ]);
        assert_eq!(proxy_of(&proxies, "https://api.example.org").unwrap(), "the proxy http://secure:1 (from HTTPS_PROXY)");
        assert_eq!(proxy_of(&proxies, "wss://api.example.org").unwrap(), "the proxy http://secure:1 (from HTTPS_PROXY)");
        assert_eq!(proxy_of(&proxies, "http://api.example.org").unwrap(), "the proxy http://plain:2 (from http_proxy)");
        assert_eq!(proxy_of(&proxies, "http://svc.internal:80"), None);
        assert_eq!(proxy_of(&proxies, "http://10.1.2.3"), None);
        let proxies = with(&[("all_proxy", "socks5h://sock"), ("HTTP_PROXY", ""), ("HTTPS_PROXY", "ftp://x")]);
        assert_eq!(proxy_of(&proxies, "http://h").unwrap(), "the proxy socks5h://sock:1080 (from all_proxy)");
        assert_eq!(proxy_of(&proxies, "https://h").unwrap(), "the proxy socks5h://sock:1080 (from all_proxy)");
        let proxies = with(&[("HTTP_PROXY", "proxy.corp:3128")]);
        assert_eq!(proxy_of(&proxies, "http://h").unwrap(), "the proxy http://proxy.corp:3128 (from HTTP_PROXY)");
        // Under CGI, `HTTP_PROXY` may be a request's header: nothing is proxied.
        let proxies = with(&[("HTTP_PROXY", "http://attacker:1"), ("REQUEST_METHOD", "GET")]);
        assert_eq!(proxy_of(&proxies, "http://h"), None);
    }

    #[test]
    fn a_route_never_shows_the_proxys_credentials_but_carries_them() {
        let proxies = with(&[("HTTP_PROXY", "http://bob:hunter2@proxy:3128"), ("HTTPS_PROXY", "socks5://bob:hunter2@sock")]);
        let route = proxies.route("http://api.example.org").unwrap();
        assert_eq!(route.to_string(), "the proxy http://proxy:3128 (from HTTP_PROXY)");
        assert!(route.basic_auth.is_some_and(|auth| auth.is_sensitive()));
        let route = proxies.route("https://api.example.org").unwrap();
        assert_eq!(route.to_string(), "the proxy socks5://sock:1080 (from HTTPS_PROXY)");
        assert_eq!(route.socks_auth, Some(("bob".into(), "hunter2".into())));
        assert!(!format!("{proxies:?}").contains("hunter2"));
    }

    #[test]
    fn the_rules_ask_for_no_variable_but_the_listed_ones() {
        // Pools are keyed on `VARIABLES` and read their rules from that snapshot: a variable
        // asked for beyond it would read as unset.
        let asked = std::sync::Mutex::new(Vec::new());
        Proxies::from_variables(|name| {
            asked.lock().unwrap().push(name.to_string());
            // Not under CGI, where no proxy variable is read at all.
            (name != "REQUEST_METHOD").then(|| "http://proxy:3128".to_string())
        });
        let asked = asked.into_inner().unwrap();
        assert!(asked.len() >= 5 && asked.iter().all(|name| VARIABLES.contains(&name.as_str())), "{asked:?}");
    }

}
