//! Logging: the `log` records of every Tessera crate go to a listener set from Kotlin or Swift,
//! and to the platform's log: logcat on Android (tag "Tessera"), os_log on Apple (subsystem
//! "com.tessera", with the `oslog` cargo feature), and stderr elsewhere when enabled.
//!
//! The logger is installed on first use of the API (and by `JNI_OnLoad` on Android). When the
//! host process already installed a `log` logger, that one is kept and receives the records
//! instead; the listener then stays silent.
//!
//! The environment variable `TESSERA_LOG` (`off`, `error`, `warn`, `info`, `debug`, `trace`)
//! sets the initial level and, on desktops, turns the stderr sink on.

use crate::error::guard_or;
use log::{LevelFilter, Log, Metadata, Record};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, OnceLock, RwLock};

/// A log level, most severe first; `Off` disables logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum)]
pub enum LogLevel {
    /// Nothing is logged.
    Off,
    /// Errors.
    Error,
    /// Warnings and errors.
    Warn,
    /// Informational messages and above.
    Info,
    /// Debugging messages and above.
    Debug,
    /// Everything.
    Trace,
}

impl From<LogLevel> for LevelFilter {
    fn from(l: LogLevel) -> LevelFilter {
        match l {
            LogLevel::Off => LevelFilter::Off,
            LogLevel::Error => LevelFilter::Error,
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
            LogLevel::Trace => LevelFilter::Trace,
        }
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;

    /// A level by name, in any case ("warning" is `Warn` too).
    fn from_str(text: &str) -> Result<LogLevel, String> {
        Ok(match text.to_ascii_lowercase().as_str() {
            "off" => LogLevel::Off,
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            _ => {
                return Err(format!(
                    "log level {text:?} is not one of off, error, warn, info, debug, trace"
                ))
            }
        })
    }
}

impl From<log::Level> for LogLevel {
    fn from(l: log::Level) -> LogLevel {
        match l {
            log::Level::Error => LogLevel::Error,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Info => LogLevel::Info,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Trace => LogLevel::Trace,
        }
    }
}

/// Receives log records; implemented in Kotlin or Swift.
///
/// Called on the thread that logs (possibly a worker thread). Calls into Tessera made from
/// `on_log` do not log back to the listener.
#[uniffi::export(callback_interface)]
pub trait LogListener: Send + Sync {
    /// One record: its level, its target (the Rust module, e.g. "tessera_ffi::session") and
    /// its message.
    fn on_log(&self, level: LogLevel, target: String, message: String);
}

/// The level used until `set_log_level` is called.
const DEFAULT_LEVEL: LevelFilter = LevelFilter::Info;

struct TesseraLogger {
    listener: RwLock<Option<Arc<dyn LogListener>>>,
    stderr: AtomicBool,
    #[cfg(target_os = "android")]
    android: android_logger::AndroidLogger,
    #[cfg(all(target_vendor = "apple", feature = "oslog"))]
    oslog: oslog::OsLogger,
}

thread_local! {
    /// Set while the listener runs on this thread, so that its own calls into Tessera do not
    /// log back into it.
    static IN_LISTENER: Cell<bool> = const { Cell::new(false) };
}

impl TesseraLogger {
    fn new() -> TesseraLogger {
        TesseraLogger {
            listener: RwLock::new(None),
            stderr: AtomicBool::new(false),
            #[cfg(target_os = "android")]
            android: android_logger::AndroidLogger::new(
                android_logger::Config::default()
                    .with_max_level(LevelFilter::Trace)
                    .with_tag("Tessera"),
            ),
            #[cfg(all(target_vendor = "apple", feature = "oslog"))]
            oslog: oslog::OsLogger::new("com.tessera"),
        }
    }
}

impl Log for TesseraLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        #[cfg(target_os = "android")]
        self.android.log(record);
        #[cfg(all(target_vendor = "apple", feature = "oslog"))]
        self.oslog.log(record);
        if self.stderr.load(Ordering::Relaxed) {
            eprintln!("[{} {}] {}", record.level(), record.target(), record.args());
        }
        if IN_LISTENER.with(|f| f.get()) {
            return;
        }
        let listener = self.listener.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(listener) = listener {
            IN_LISTENER.with(|f| f.set(true));
            let level = LogLevel::from(record.level());
            let target = record.target().to_string();
            let message = record.args().to_string();
            // A listener that throws must not take the logging thread down.
            let _ = catch_unwind(AssertUnwindSafe(|| listener.on_log(level, target, message)));
            IN_LISTENER.with(|f| f.set(false));
        }
    }

    fn flush(&self) {}
}

fn logger() -> &'static TesseraLogger {
    static LOGGER: OnceLock<TesseraLogger> = OnceLock::new();
    LOGGER.get_or_init(TesseraLogger::new)
}

fn level_from_env() -> Option<LevelFilter> {
    std::env::var("TESSERA_LOG").ok().and_then(|v| v.trim().parse::<LevelFilter>().ok())
}

/// Installs Tessera's logger as the process's `log` logger, once. Returns whether Tessera's
/// logger is the installed one.
pub fn ensure_installed() -> bool {
    static INSTALL: Once = Once::new();
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    INSTALL.call_once(|| {
        let ours = log::set_logger(logger()).is_ok();
        INSTALLED.store(ours, Ordering::SeqCst);
        if ours {
            let env = level_from_env();
            log::set_max_level(env.unwrap_or(DEFAULT_LEVEL));
            let desktop = !cfg!(any(target_os = "android", target_vendor = "apple"));
            if env.is_some() && desktop {
                logger().stderr.store(true, Ordering::Relaxed);
            }
        }
    });
    INSTALLED.load(Ordering::SeqCst)
}

/// Sets the most verbose level that is logged (for the listener and the platform log).
/// The default is `Info`.
#[uniffi::export]
pub fn set_log_level(level: LogLevel) {
    guard_or(
        "set_log_level",
        || (),
        || {
            ensure_installed();
            log::set_max_level(level.into());
        },
    )
}

/// The current level.
#[uniffi::export]
pub fn log_level() -> LogLevel {
    guard_or(
        "log_level",
        || LogLevel::Off,
        || match log::max_level() {
            LevelFilter::Off => LogLevel::Off,
            LevelFilter::Error => LogLevel::Error,
            LevelFilter::Warn => LogLevel::Warn,
            LevelFilter::Info => LogLevel::Info,
            LevelFilter::Debug => LogLevel::Debug,
            LevelFilter::Trace => LogLevel::Trace,
        },
    )
}

/// Sets the listener that receives every record at or above the level, or removes it
/// (`None`). Only one listener is kept: a new one replaces the old.
#[uniffi::export]
pub fn set_log_listener(listener: Option<Box<dyn LogListener>>) {
    guard_or(
        "set_log_listener",
        || (),
        || {
            if !ensure_installed() {
                log::warn!(
                    "another logger is installed in this process: the log listener gets nothing"
                );
            }
            let listener: Option<Arc<dyn LogListener>> = listener.map(Arc::from);
            *logger().listener.write().unwrap_or_else(|p| p.into_inner()) = listener;
        },
    )
}

/// Turns printing of records to stderr on or off (useful on desktops and in tests; Android
/// and Apple have their platform log instead).
#[uniffi::export]
pub fn set_log_to_stderr(enabled: bool) {
    guard_or(
        "set_log_to_stderr",
        || (),
        || {
            ensure_installed();
            logger().stderr.store(enabled, Ordering::Relaxed);
        },
    )
}
