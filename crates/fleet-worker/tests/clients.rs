//! The clients in other languages (docs/clients.md) against real workers:
//! send and wait, the image + caption fan-out, a reused request id, and
//! predicted-wait admission. Python: clients/python/check_client.py with
//! confluent-kafka and redis-py from the project's venv. Go:
//! clients/go/src/fleetcheck with Sarama and Redigo from Debian's packages
//! (GOPATH mode, as `make setup` installs them).

mod common;

use common::{model_repo, serial, Broker, Redis, Worker};
use fleet_proto::ModelName;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../clients")
}

/// Runs `command` against a broker, a Redis and two real workers (minilm,
/// efficientnet_lite0), with --brokers, --redis and --photo appended.
async fn against_a_fleet(mut command: Command) -> String {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    for model in ["minilm", "efficientnet_lite0"] {
        broker.create_topics(&ModelName::parse(model).unwrap(), 2).await;
    }
    let text = Worker::start("minilm", &broker, &redis, &[]);
    let image = Worker::start("efficientnet_lite0", &broker, &redis, &[]);
    text.wait_until_serving(2).await;
    image.wait_until_serving(2).await;
    let photo = model_repo().join("efficientnet_lite0/1/reference/coffee.png");
    command.args(["--brokers", &broker.addr, "--redis", &redis.url()]).arg("--photo").arg(&photo);
    let output: Output =
        tokio::task::spawn_blocking(move || command.output().expect("running the client's check")).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the client's checks failed:\n{stdout}");
    assert!(stdout.contains("all checks passed"), "{stdout}");
    stdout
}

/// The venv's python3 (scripts/env.sh puts it first on PATH), importing
/// nothing from the checkout: `-P` keeps the script's own folder off
/// `sys.path`, and it runs elsewhere, so `fleet_client` is the installed
/// package (`pip install ./clients/python`, done by `make setup`).
fn installed_python() -> Command {
    let mut command = Command::new("python3");
    command.arg("-P").current_dir(std::env::temp_dir());
    command
}

#[test]
fn the_python_client_is_the_installed_package() {
    let script =
        "import importlib.metadata as m, fleet_client; print(fleet_client.__file__, m.version('fleet-client'))";
    let output = installed_python().args(["-c", script]).output().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "fleet_client is not installed: {}", String::from_utf8_lossy(&output.stderr));
    let (path, version) = printed.trim().rsplit_once(' ').unwrap();
    assert!(path.contains("site-packages") && !path.contains("clients/python"), "imported from {path}");
    // Versioned with the workspace (clients/python/pyproject.toml).
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "the package's version is not the workspace's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_sends_waits_fans_out_and_admits() {
    let mut command = installed_python();
    command.arg(clients_dir().join("python/check_client.py"));
    let stdout = against_a_fleet(command).await;
    assert!(stdout.contains("ok: refused before sending"), "{stdout}");
}

/// `go build` of the Go check, in GOPATH mode: the project's package beside
/// Debian's Go libraries.
fn build_go_check(out: &Path) {
    let go = clients_dir().join("go");
    let gopath = format!("{}:/usr/share/gocode", go.display());
    let cache = std::env::temp_dir().join("fleet-go-cache");
    let build = Command::new("go")
        .args(["build", "-o"])
        .arg(out)
        .arg("fleetcheck")
        .env("GO111MODULE", "off")
        .env("GOPATH", gopath)
        .env("GOCACHE", cache)
        .env("GOFLAGS", "")
        .output()
        .expect("running go (make setup installs golang-go and the Go libraries)");
    assert!(build.status.success(), "go build: {}", String::from_utf8_lossy(&build.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_client_sends_waits_fans_out_and_admits() {
    let binary = std::env::temp_dir().join(format!("fleetcheck-{}", std::process::id()));
    tokio::task::spawn_blocking({
        let binary = binary.clone();
        move || build_go_check(&binary)
    })
    .await
    .unwrap();
    let stdout = against_a_fleet(Command::new(&binary)).await;
    assert!(stdout.contains("ok: refused before sending"), "{stdout}");
    let _ = std::fs::remove_file(&binary);
}
