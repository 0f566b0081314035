//! TLS for the HTTP listener (`tls_cert` + `tls_key`: PEM files, rustls).
//!
//! The certificate chain and key are read at start (a bad file stops the
//! start with the reason) and again on SIGHUP ([`Tls::reload`]): new
//! connections get the new certificate, connections already open keep
//! theirs, and a reload that fails keeps the one in use (and says why in
//! the log), so a half-written file never takes the listener down.
//! Both HTTP/2 and HTTP/1.1 are offered (ALPN).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Where the certificate chain and its key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate first, then any intermediates.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The listener's TLS settings, reloadable.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads `files`.
    ///
    /// # Errors
    /// What is wrong with which file: missing, not PEM, no certificate, no
    /// key, or a key that does not match the certificate.
    pub fn load(files: TlsFiles) -> Result<Self, String> {
        let config = read(&files)?;
        Ok(Self {
            files,
            current: RwLock::new(config),
        })
    }

    /// Reads the files again; on success new connections use them.
    ///
    /// # Errors
    /// As [`Tls::load`]; the settings in use stay.
    pub fn reload(&self) -> Result<(), String> {
        let config = read(&self.files)?;
        *self.current.write().expect("poisoned") = config;
        Ok(())
    }

    /// The acceptor for the next connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().expect("poisoned").clone())
    }
}

fn read(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("tls_cert {}: {e}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls_cert {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls_cert {}: no CERTIFICATE in it",
            files.cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("tls_key {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "tls_cert {} with tls_key {}: {e}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
