//! Graceful shutdown as a named thing (as tokio's mini-redis has it): a
//! [`Trigger`] fires once, and every task holding a [`Shutdown`] of it can
//! ask whether it fired or wait until it does. The worker stops in two
//! steps, each its own trigger: first reading and the repository watcher
//! stop (the rest drains what they handed on), then the status reporter.

use tokio::sync::watch;

/// Fires the shutdown for every [`Shutdown`] made from it.
pub struct Trigger(watch::Sender<bool>);

/// One task's view of a shutdown.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    pub fn is_shutdown(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the shutdown has fired (at once if it already has, or
    /// if its trigger is gone).
    pub async fn recv(&mut self) {
        let _ = self.0.wait_for(|fired| *fired).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_holder_sees_the_one_shutdown() {
        let (trigger, shutdown) = channel();
        let (mut a, mut b) = (shutdown.clone(), shutdown);
        assert!(!a.is_shutdown());
        let waiting = tokio::spawn(async move { b.recv().await });
        trigger.fire();
        waiting.await.unwrap();
        a.recv().await;
        assert!(a.is_shutdown());
    }
}
