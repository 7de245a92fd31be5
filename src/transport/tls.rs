//! TLS servers (`rediss://`): the settings (`TlsOptions`), rustls' client configuration built
//! from them once per server (`TlsSetup`), and the redis-rs client of the near cache's
//! tracking connection. The data connections run TLS on our own sockets (`tls_io.rs`), with
//! the same handshake, reads and writes as plain ones.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::errors::{Error, Result};

/// TLS settings for a `rediss://` server (OPTIONS `SSL_*`); certificates and key as PEM.
#[derive(Clone)]
pub struct TlsOptions {
    pub ca_certs: Option<Vec<u8>>,
    pub certfile: Option<Vec<u8>>,
    pub keyfile: Option<Vec<u8>>,
    pub verify: bool,
    pub check_hostname: bool,
}

impl TlsOptions {
    /// Whether nothing was set (the only settings a plain server accepts).
    pub fn is_default(&self) -> bool {
        self.ca_certs.is_none()
            && self.certfile.is_none()
            && self.keyfile.is_none()
            && self.verify
            && self.check_hostname
    }
}

/// How every TLS connection to one server starts: rustls' configuration and the name the
/// server's certificate must carry. Built once, when the client is.
pub struct TlsSetup {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsSetup {
    /// The setup for `host` with these settings; `insecure`: the LOCATION said `#insecure`.
    pub fn new(host: &str, tls: &TlsOptions, insecure: bool) -> Result<Self> {
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|_| Error::Config(format!("{host:?} is not a host name TLS can verify")))?
            .to_owned();
        let config = Arc::new(client_config(tls, insecure || !tls.verify)?);
        Ok(TlsSetup { config, name })
    }

    /// A new client session (its handshake not yet run).
    pub fn session(&self) -> Result<ClientConnection> {
        let mut session = ClientConnection::new(Arc::clone(&self.config), self.name.clone())
            .map_err(|e| Error::Config(format!("TLS settings refused: {e}")))?;
        // Writes are bounded by what callers send, and flushed by them: never refuse one.
        session.set_buffer_limit(None);
        Ok(session)
    }
}

/// ring: the provider redis-rs' webpki already builds (no second crypto library).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(tls: &TlsOptions, insecure: bool) -> Result<ClientConfig> {
    let provider = provider();
    let mut roots = RootCertStore::empty();
    match &tls.ca_certs {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| bad_pem("SSL_CA_CERTS", &e))?;
                roots
                    .add(cert)
                    .map_err(|e| Error::Config(format!("invalid CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(Error::Config(
                    "invalid TLS certificate or key: SSL_CA_CERTS holds no certificate".into(),
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let roots = Arc::new(roots);
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS settings refused: {e}")))?
        .with_root_certificates(Arc::clone(&roots));
    let mut config = match (&tls.certfile, &tls.keyfile) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad_pem("SSL_CERTFILE", &e))?;
            if chain.is_empty() {
                return Err(Error::Config(
                    "invalid TLS certificate or key: SSL_CERTFILE holds no certificate".into(),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad_pem("SSL_KEYFILE", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Config(format!("invalid TLS certificate or key: {e}")))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(Error::Config(
                "SSL_CERTFILE and SSL_KEYFILE must be given together".to_owned(),
            ))
        }
    };
    if insecure {
        // SSL_CERT_REQS none: any certificate, and no name sent (as redis-py and redis-rs).
        config.enable_sni = false;
        let algorithms = provider.signature_verification_algorithms;
        config.dangerous().set_certificate_verifier(Arc::new(AnyCertificate(algorithms)));
    } else if !tls.check_hostname {
        // SSL_CHECK_HOSTNAME False: the certificate must still chain to a trusted CA.
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| Error::Config(format!("TLS settings refused: {e}")))?;
        config.dangerous().set_certificate_verifier(Arc::new(AnyName(inner)));
    }
    Ok(config)
}

/// A PEM error naming the setting, never the file's contents.
fn bad_pem(setting: &str, err: &rustls::pki_types::pem::Error) -> Error {
    let what = match err {
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item found".to_owned(),
        _ => "not readable PEM".to_owned(),
    };
    Error::Config(format!("invalid TLS certificate or key: {setting}: {what}"))
}

/// SSL_CERT_REQS none: every certificate is taken (signatures are not checked either).
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
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
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// SSL_CHECK_HOSTNAME False: a certificate that chains to a trusted CA, whatever its names.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

fn wrong_name(err: &rustls::Error) -> bool {
    matches!(
        err,
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. }
        )
    )
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(err) if wrong_name(&err) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
