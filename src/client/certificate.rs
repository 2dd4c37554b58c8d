//! A server certificate that TLS refused, told in words with what to do about it.
//!
//! rustls says `invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))` for a
//! self-signed certificate and `UnknownIssuer` for a private CA's: true, but no help to someone
//! who needs to hear "self-signed" and "set SSL_CERT_FILE".

use rustls::CertificateError;

/// Where a private CA is given: read, with the system's own, when a connection pool is built.
const TRUST: &str =
    "to trust a private CA, set SSL_CERT_FILE to its PEM file (or SSL_CERT_DIR to a directory of them) before making the client";

/// The refusal in `err` or its causes described, if the connection failed because the
/// server's certificate (for `host`) was not accepted.
pub fn refused(err: &(dyn std::error::Error + 'static), host: &str) -> Option<String> {
    let mut cause = Some(err);
    while let Some(error) = cause {
        if let Some(rustls::Error::InvalidCertificate(why)) = error.downcast_ref::<rustls::Error>() {
            return Some(format!("the server's TLS certificate was refused: {}", describe(why, host)));
        }
        // An `io::Error` that wraps another error (rustls's, inside one or two of them as the
        // connectors hand it on) gives that error's source as its own, skipping the error itself.
        cause = match error.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    None
}

fn describe(why: &CertificateError, host: &str) -> String {
    use CertificateError as C;
    match why {
        C::UnknownIssuer => {
            format!("it is not signed by a certificate authority this machine trusts (a private CA's, or self-signed); {TRUST}")
        }
        C::Other(other) if matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity)) => {
            // A CA certificate is never accepted as a server's own, trusted or not.
            "it is a CA certificate serving as the server's own (a self-signed one, most likely), which is never \
             accepted, trusted or not: have the server use a certificate issued by a CA (a private one will do); then, \
             to trust a private CA, set SSL_CERT_FILE to its PEM file before making the client"
                .into()
        }
        C::Expired | C::ExpiredContext { .. } => {
            "it has expired; the server's certificate must be renewed (or this machine's clock is wrong)".into()
        }
        C::NotValidYet | C::NotValidYetContext { .. } => {
            "it is not valid yet; check this machine's clock (or the server's certificate)".into()
        }
        C::NotValidForNameContext { presented, .. } if !presented.is_empty() => format!(
            "it is issued for {}, not for {host}; check the host in base_url (or the server's certificate)",
            presented.join(", ")
        ),
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            format!("it is not issued for {host}; check the host in base_url (or the server's certificate)")
        }
        C::Revoked => "it has been revoked".into(),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn refusal(why: CertificateError) -> String {
        // As reqwest has it: inside an io::Error inside another, inside the connect error.
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(why));
        let io = std::io::Error::other(io);
        #[derive(Debug)]
        struct Connect(std::io::Error);
        impl std::fmt::Display for Connect {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Connect {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        refused(&Connect(io), "api.example.com").expect("a refused certificate")
    }

    #[test]
    fn a_refused_certificate_is_told_in_words() {
        let self_signed = CertificateError::Other(rustls::OtherError(Arc::new(webpki::Error::CaUsedAsEndEntity)));
        let text = refusal(self_signed);
        assert!(text.contains("self-signed") && text.contains("SSL_CERT_FILE"), "{text}");
        let text = refusal(CertificateError::UnknownIssuer);
        assert!(text.contains("not signed by a certificate authority") && text.contains("SSL_CERT_FILE"), "{text}");
        assert!(refusal(CertificateError::Expired).contains("it has expired"));
        assert!(refusal(CertificateError::NotValidYet).contains("clock"));
        let name = CertificateError::NotValidForNameContext {
            expected: rustls::pki_types::ServerName::try_from("api.example.com").unwrap(),
            presented: vec!["other.example.com".into()],
        };
        assert!(refusal(name).contains("issued for other.example.com, not for api.example.com"));
        assert!(refused(&std::io::Error::other("connection refused"), "h").is_none());
    }
}
