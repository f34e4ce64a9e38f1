//! How a connection is secured: the URL's `sslmode`, read as libpq reads it, with rustls.
//!
//! - `disable`: plain.
//! - `prefer` (the default) and `require`: encrypted when the server offers it (`require`:
//!   always), the server's certificate not checked — libpq's meaning of these modes.
//! - `verify-ca` and `verify-full`: encrypted, and the certificate checked against the public
//!   roots (webpki) and the CA certificates in the file `sslrootcert=` names, for the host the
//!   URL names (both modes check the name).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use loopx_core::{Error, Result};

/// A URL ready for the client, and the TLS connector it needs (`None`: plain).
pub(crate) struct Secured {
    pub url: String,
    pub tls: Option<MakeRustlsConnect>,
}

/// Reads `sslmode` and `sslrootcert` off `url` (a `postgres://` URL; a key=value string is
/// used as it is, its `sslmode` honoured the same way).
pub(crate) fn secure(url: &str) -> Result<Secured> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut mode = None;
    let mut root = None;
    let mut kept = Vec::new();
    if url.contains("://") {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", v)) => mode = Some(v.to_owned()),
                Some(("sslrootcert", v)) => root = Some(v.to_owned()),
                _ => kept.push(pair.to_owned()),
            }
        }
    } else {
        mode = url.split_whitespace().find_map(|kv| kv.strip_prefix("sslmode=")).map(str::to_owned);
    }
    let mode = mode.unwrap_or_else(|| "prefer".to_owned());
    // The client knows disable, prefer and require; checking is this module's.
    let client_mode = match mode.as_str() {
        "disable" | "prefer" | "require" => mode.as_str(),
        "verify-ca" | "verify-full" => "require",
        other => {
            return Err(Error::usage(format!(
                "sslmode={other} is not one loopx knows: use disable, prefer, require, verify-ca or verify-full"
            )));
        }
    };
    let url = if url.contains("://") {
        kept.push(format!("sslmode={client_mode}"));
        format!("{base}?{}", kept.join("&"))
    } else {
        url.to_owned()
    };
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS: {e}")))?;
    let config = match mode.as_str() {
        "disable" => return Ok(Secured { url, tls: None }),
        "prefer" | "require" => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider.signature_verification_algorithms)))
            .with_no_client_auth(),
        _ => {
            let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
            if let Some(path) = &root {
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|i| i.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| {
                        Error::usage(format!("sslrootcert={path}: not a file of PEM certificates ({e})"))
                    })?;
                for c in certs {
                    roots.add(c).map_err(|e| Error::usage(format!("sslrootcert={path}: {e}")))?;
                }
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(Secured { url, tls: Some(MakeRustlsConnect::new(config)) })
}

/// `prefer` and `require`: any certificate is taken (the connection is encrypted, the server not
/// authenticated), its signatures still checked.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_client_gets_a_mode_it_knows_and_never_the_ca_path() {
        let s = secure(
            "postgres://ann@db:5432/loopx?application_name=x&sslmode=verify-full&sslrootcert=/nope.pem",
        );
        let e = s.err().unwrap();
        assert!(e.message.contains("sslrootcert=/nope.pem"), "{}", e.message);
        let s = secure("postgres://ann@db:5432/loopx?application_name=x&sslmode=verify-full").unwrap();
        assert_eq!(s.url, "postgres://ann@db:5432/loopx?application_name=x&sslmode=require");
        assert!(s.tls.is_some());
        let plain = secure("postgres://ann@db/loopx?sslmode=disable").unwrap();
        assert!(plain.tls.is_none());
        assert_eq!(secure("postgres://ann@db/loopx").unwrap().url, "postgres://ann@db/loopx?sslmode=prefer");
        assert!(secure("postgres://ann@db/loopx?sslmode=allow").is_err());
        assert!(secure("host=db user=ann sslmode=disable").unwrap().tls.is_none());
    }
}
