//! The one way lathe starts building an HTTP client: reqwest over rustls,
//! with `ring` as the crypto provider (Cargo.toml says why not aws-lc-rs).
//! Callers set their own timeouts, proxies and redirects; this module knows
//! nothing of what the client is for.

use std::sync::Once;

/// A reqwest builder whose TLS will work: `ring` is installed as rustls's
/// process-wide provider first (reqwest without its default provider refuses
/// to build a client otherwise).
pub fn client_builder() -> reqwest::ClientBuilder {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Err only if a provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

#[cfg(test)]
mod tests {
    /// A client with TLS builds (reqwest panics when no provider is installed).
    #[test]
    fn a_tls_client_builds() {
        assert!(super::client_builder().https_only(true).build().is_ok());
    }
}
