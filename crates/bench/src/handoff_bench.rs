//! What handing one piece of synchronous user code to another thread costs (`pipeline/handoff`):
//! the floor under the pipeline's default path, where an observer or a guard that may block
//! runs on the user-code pool instead of the async worker.

use crate::Bench;
// The pipeline benches' runtime: this is the floor under their calls.
use crate::pipeline_bench::runtime;
use crate::report::{emit, quantile};
use dsh_core::pool::BlockingPool;
use std::time::{Duration, Instant};

/// Benchmarks of this module.
pub const BENCHES: &[Bench] = &[Bench {
    name: "pipeline/handoff",
    in_all: true,
    run: handoff,
}];

const WARM_UP: usize = 2_000;
const ROUNDS: usize = 20_000;

/// Round trips of an empty job through `pool` from one task, one after another, in µs.
async fn pool_round_trips(pool: &BlockingPool) -> Vec<f64> {
    let mut samples = Vec::with_capacity(ROUNDS);
    for i in 0..WARM_UP + ROUNDS {
        let t = Instant::now();
        let _ = pool
            .run("empty", Some(Duration::from_secs(5)), |_| ())
            .await;
        if i >= WARM_UP {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples
}

/// The same with `tokio::task::spawn_blocking`: tokio's own hand-off, the floor to beat.
async fn spawn_blocking_round_trips() -> Vec<f64> {
    let mut samples = Vec::with_capacity(ROUNDS);
    for i in 0..WARM_UP + ROUNDS {
        let t = Instant::now();
        let _ = tokio::task::spawn_blocking(|| ()).await;
        if i >= WARM_UP {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples
}

/// Empty jobs per second through `pool` from 100 tasks submitting at once (1,000 each).
async fn pool_jobs_per_s(pool: &BlockingPool) -> f64 {
    const TASKS: usize = 100;
    const EACH: usize = 1_000;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let _ = pool
                    .run("empty", Some(Duration::from_secs(5)), |_| ())
                    .await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (TASKS * EACH) as f64 / started.elapsed().as_secs_f64()
}

fn handoff() {
    let rt = runtime();
    let b = "pipeline/handoff";
    let figures = rt.block_on(rt.spawn(async {
        // As the pipeline makes it for user code (`PipelineConfig::user_code_threads`).
        let pool = BlockingPool::on_runtime("bench-user-code", 16);
        let mut pooled = pool_round_trips(&pool).await;
        let mut tokio_floor = spawn_blocking_round_trips().await;
        let per_s = pool_jobs_per_s(&pool).await;
        (
            quantile(&mut pooled, 0.5),
            quantile(&mut pooled, 0.99),
            quantile(&mut tokio_floor, 0.5),
            per_s,
        )
    }));
    let Ok((p50, p99, floor, per_s)) = figures else {
        eprintln!("the bench task failed");
        std::process::exit(3);
    };
    emit(b, "user_code_pool_p50_us", p50, "us");
    emit(b, "user_code_pool_p99_us", p99, "us");
    emit(b, "spawn_blocking_p50_us", floor, "us");
    emit(b, "user_code_pool_jobs_per_s", per_s, "jobs/s");
}
