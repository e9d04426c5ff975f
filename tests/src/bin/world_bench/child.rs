//! The contender side of a measurement: the `MARK` handshake around the timed part, the
//! three timing shapes (sequential, concurrent rounds, transfers) and the `RESULT` line.
//!
//! A contender runs in a process of its own (`world-bench --contender ID`) so its peak RSS
//! is its own. It prints `MARK start` and `MARK end` around the timed part and waits for a
//! line on stdin after each, while the parent reads the emulator's counters and CPU time.

use std::future::Future;
use std::io::BufRead as _;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Errors of a contender run (any source).
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// What a contender reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// Per-op (sequential), per-round (concurrent) or per-transfer milliseconds.
    #[serde(default)]
    pub samples_ms: Vec<f64>,
    /// Operations in the timed part (execs, write+read pairs, floods).
    #[serde(default)]
    pub ops: u64,
    /// Operations that failed (concurrent rounds).
    #[serde(default)]
    pub errors: u64,
    /// Bytes moved (both directions for files).
    #[serde(default)]
    pub bytes: u64,
    /// Wall time of the timed part.
    #[serde(default)]
    pub secs: f64,
    /// Why the contender could not run the figure at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Prints `MARK what` and waits for the parent's go-ahead line.
pub fn mark(what: &str) {
    println!("MARK {what}");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// `n` sequential runs of `f` (after 3 untimed warm-ups).
pub async fn sequential<F, Fut>(n: u64, mut f: F) -> Result<Outcome, AnyError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), AnyError>>,
{
    for _ in 0..3 {
        f().await?;
    }
    let mut samples = Vec::with_capacity(n as usize);
    mark("start");
    let t0 = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        f().await?;
        samples.push(ms(t));
    }
    let secs = t0.elapsed().as_secs_f64();
    mark("end");
    Ok(Outcome {
        samples_ms: samples,
        ops: n,
        secs,
        ..Outcome::default()
    })
}

/// `rounds` rounds of `conc` runs of `f` in flight at once; failures are counted.
pub async fn concurrent<F, Fut>(rounds: u64, conc: u64, f: F) -> Result<Outcome, AnyError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), AnyError>>,
{
    f().await?;
    let mut samples = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    mark("start");
    let t0 = Instant::now();
    for _ in 0..rounds {
        let t = Instant::now();
        let all = futures::future::join_all((0..conc).map(|_| f())).await;
        samples.push(ms(t));
        for r in all {
            if let Err(e) = r {
                errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    mark("end");
    if let Some(e) = first_error {
        eprintln!("world-bench contender: first of {errors} failed execs: {e}");
    }
    Ok(Outcome {
        samples_ms: samples,
        ops: rounds * conc,
        errors,
        secs,
        ..Outcome::default()
    })
}

/// `count` runs of `f`, each moving `bytes_each` bytes (both directions counted by the
/// caller).
pub async fn transfers<F, Fut>(count: u64, bytes_each: u64, mut f: F) -> Result<Outcome, AnyError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), AnyError>>,
{
    let mut samples = Vec::new();
    mark("start");
    let t0 = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        f().await?;
        samples.push(ms(t));
    }
    let secs = t0.elapsed().as_secs_f64();
    mark("end");
    Ok(Outcome {
        samples_ms: samples,
        ops: count,
        bytes: bytes_each * count,
        secs,
        ..Outcome::default()
    })
}

/// Prints the `RESULT` line the parent parses.
pub fn report(r: Result<Outcome, AnyError>) {
    let out = r.unwrap_or_else(|e| Outcome {
        error: Some(e.to_string()),
        ..Outcome::default()
    });
    match serde_json::to_string(&out) {
        Ok(j) => println!("RESULT {j}"),
        Err(e) => println!("RESULT {{\"error\":\"encoding the result: {e}\"}}"),
    }
}
