//! Services the test suite needs, started by `cargo xtask test` and stopped
//! again whatever happens.
//!
//! Each service is a [`Service`]: started before the tests, it exports the
//! environment variables the tests read, and is stopped (and its files
//! removed) afterwards — on success, on failure, on Ctrl-C, and from `Drop`
//! if anything in between panics.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Keeps this process alive on Ctrl-C/SIGTERM so it can stop the services;
/// the test process receives the signal too and stops by itself.
pub(crate) fn install_interrupt_handler() -> Result<()> {
    ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::SeqCst);
        eprintln!("xtask: interrupted; stopping services");
    })?;
    Ok(())
}

/// Whether Ctrl-C was pressed; long waits (service start-up) poll it.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A running service.
pub(crate) trait Service {
    /// Environment variables that tell the tests where the service is.
    fn env(&self) -> Vec<(String, String)>;
    /// Stops the service and removes its files. Called once; must also be
    /// safe to call from `Drop` after a failed start.
    fn stop(&mut self) -> Result<()>;
}

/// Every started service, stopped in reverse order.
pub(crate) struct Running {
    services: Vec<Box<dyn Service>>,
}

impl Running {
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        self.services.iter().flat_map(|s| s.env()).collect()
    }

    /// Stops every service, reporting the first failure after trying all.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Result<()> {
        let mut first_err = None;
        while let Some(mut service) = self.services.pop() {
            if let Err(e) = service.stop() {
                eprintln!("xtask: stopping a service failed: {e:#}");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_all();
    }
}

/// Starts every service the tests need. If one fails to start, the ones
/// already started are stopped before the error is returned.
pub(crate) fn start_all() -> Result<Running> {
    // Services register here (PostgreSQL, the S3-compatible server, …).
    let mut running = Running {
        services: Vec::new(),
    };
    // On an error, dropping `running` stops what was already started.
    running.services.push(Box::new(crate::postgres::start()?));
    running.services.push(Box::new(crate::s3::start()?));
    running
        .services
        .push(Box::new(crate::browser::ensure(&crate::s3::target_dir())));
    running
        .services
        .push(Box::new(crate::agents::ensure(&crate::s3::target_dir())));
    running
        .services
        .push(Box::new(crate::api_tools::ensure(&crate::s3::target_dir())));
    Ok(running)
}
