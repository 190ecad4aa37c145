//! `fleet-worker --model <name>`: one consumer-group member serving one model.

use clap::Parser;
use fleet_worker::config::WorkerArgs;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

/// After `run` returns, how long tasks still blocked (a write retrying
/// against a dependency that is away, a stuck model call) may keep the
/// process from exiting: SIGTERM is honoured in every state.
const EXIT_GRACE: Duration = Duration::from_secs(2);

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,librdkafka=warn".into()))
        .init();
    let args = WorkerArgs::parse();
    fleet_worker::kernel_caches::apply_before_libtorch(
        args.kernel_cache_capacity,
        &args.model_repo,
        args.model.as_str(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(fleet_worker::worker::run(args, shutdown_signal()));
    // Not a plain drop: that waits for every blocking task to finish.
    runtime.shutdown_timeout(EXIT_GRACE);
    result
}

/// SIGTERM (Kubernetes) or Ctrl-C: stop reading, drain, commit, exit.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested");
}
