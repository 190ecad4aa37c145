//! A throwaway PostgreSQL database: the storage of a broker that must keep
//! its data across a restart (drills, SCRAM users). Separate from the
//! broker because the database outlives each broker process started on it.

use crate::process::free_port;
use std::process::Command;

/// A fresh PostgreSQL database for a durable broker, on the local server
/// (`FLEET_POSTGRES_URL`, default postgres://postgres:postgres@127.0.0.1/postgres),
/// dropped when this handle drops. Made with `psql`.
pub struct PostgresDatabase {
    admin_url: String,
    name: String,
}

impl PostgresDatabase {
    pub fn create(prefix: &str) -> Self {
        let admin_url = std::env::var("FLEET_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1/postgres?sslmode=disable".into());
        let name = format!("{prefix}_{}_{}", std::process::id(), free_port());
        let database = Self { admin_url, name };
        database.psql(&format!("CREATE DATABASE {}", database.name));
        database
    }

    /// The URL of this database, for nisshi's `--storage-engine`.
    pub fn url(&self) -> String {
        let (base, query) = self.admin_url.split_once('?').unwrap_or((&self.admin_url, ""));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        let query = if query.is_empty() { String::new() } else { format!("?{query}") };
        format!("{server}/{}{query}", self.name)
    }

    fn psql(&self, sql: &str) {
        let output = Command::new("psql")
            .args([self.admin_url.as_str(), "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
            .output()
            .expect("running psql (PostgreSQL client; the drills need a PostgreSQL server on 127.0.0.1:5432)");
        assert!(output.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([self.admin_url.as_str(), "-q", "-c", &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)])
            .output();
    }
}
