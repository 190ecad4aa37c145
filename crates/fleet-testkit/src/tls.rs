//! Throwaway certificates for the TLS tests of the broker and of Redis:
//! made fresh per test run, so no key is ever checked in.

/// Throwaway certificates for TLS tests: a CA, a server certificate for
/// 127.0.0.1 and localhost signed by it, and a client certificate for
/// mutual TLS; PEM files in a fresh directory.
pub struct TestCertificates {
    pub dir: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    pub server_cert: std::path::PathBuf,
    pub server_key: std::path::PathBuf,
    pub client_cert: std::path::PathBuf,
    pub client_key: std::path::PathBuf,
}

impl TestCertificates {
    /// `name` keeps the directories of several sets apart.
    pub fn generate(name: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let dir = std::env::temp_dir().join(format!("fleet-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("certificate dir");
        let write = |file: &str, pem: String| {
            let path = dir.join(file);
            std::fs::write(&path, pem).expect("writing a certificate");
            path
        };

        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, format!("fleet test CA {name}"));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let ca = write("ca.pem", ca_cert.pem());
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |common_name: &str, names: Vec<String>| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, common_name);
            let cert = params.signed_by(&key, &issuer).expect("leaf certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key_pem) = leaf("fleet test server", vec!["127.0.0.1".into(), "localhost".into()]);
        let (client_pem, client_key_pem) = leaf("fleet test client", vec!["fleet-client".into()]);
        Self {
            ca,
            server_cert: write("server.pem", server_pem),
            server_key: write("server-key.pem", server_key_pem),
            client_cert: write("client.pem", client_pem),
            client_key: write("client-key.pem", client_key_pem),
            dir,
        }
    }
}
