use super::*;
use crate::backoff::Backoff;
use crate::health::Health;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A pool of at most `max` over a fresh queue, each job running `job`.
fn pool(
    max: usize,
    retire_after: Duration,
    job: Job<u32>,
) -> (Workers<u32>, Arc<WorkQueue<u32>>, Arc<Health>) {
    let queue = Arc::new(WorkQueue::new(Backoff::new(
        Duration::from_millis(5),
        Duration::from_secs(1),
    )));
    let health = Arc::new(Health::default());
    let workers = Workers::start(WorkerSetup {
        queue: queue.clone(),
        job,
        health: health.clone(),
        stop: Arc::new(Stop::new()),
        liveness_window: Duration::from_millis(300),
        max,
        retire_after,
        on_long_wait: || {},
    })
    .unwrap();
    (workers, queue, health)
}

/// Poll `f` for up to 5 s.
fn eventually(f: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Jobs that take 50 ms each, counting how many run at once at most.
fn slow_jobs() -> (Job<u32>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (now, most, done) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (n, m, d) = (now.clone(), most.clone(), done.clone());
    let job: Job<u32> = Arc::new(move |_: &u32| {
        let running = n.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(running, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        n.fetch_sub(1, Ordering::SeqCst);
        d.fetch_add(1, Ordering::SeqCst);
    });
    (job, most, done)
}

#[test]
fn a_burst_gets_every_worker_and_a_quiet_pool_keeps_one() {
    let (job, most, done) = slow_jobs();
    let (workers, queue, _) = pool(4, Duration::from_millis(200), job);
    assert_eq!(workers.live(), 1, "one worker before any work");
    for k in 0..40 {
        queue.add(k);
    }
    assert!(eventually(|| done.load(Ordering::SeqCst) == 40));
    assert_eq!(most.load(Ordering::SeqCst), 4, "the burst ran on all four");
    assert!(
        eventually(|| workers.live() == 1),
        "idle workers end, one stays"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(workers.live(), 1, "the last worker stays");
    queue.add(99);
    assert!(
        eventually(|| done.load(Ordering::SeqCst) == 41),
        "and still works"
    );
    assert!(workers.shut_down(Duration::from_secs(2)));
}

#[test]
fn one_key_waiting_behind_a_busy_worker_starts_one_more_not_all() {
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let (started, g) = (Arc::new(AtomicUsize::new(0)), gate.clone());
    let s = started.clone();
    let job: Job<u32> = Arc::new(move |k: &u32| {
        s.fetch_add(1, Ordering::SeqCst);
        if *k == 0 {
            drop(g.lock());
        }
    });
    let (workers, queue, _) = pool(8, Duration::from_secs(30), job);
    queue.add(0);
    assert!(eventually(|| started.load(Ordering::SeqCst) == 1));
    queue.add(1);
    assert!(
        eventually(|| started.load(Ordering::SeqCst) == 2),
        "a second worker took it"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(workers.live(), 2);
    drop(held);
    assert!(workers.shut_down(Duration::from_secs(2)));
}

#[test]
fn a_waiting_worker_is_alive_and_one_stuck_in_a_job_is_not() {
    let gate = Arc::new(Mutex::new(()));
    let g = gate.clone();
    let job: Job<u32> = Arc::new(move |_: &u32| drop(g.lock()));
    let (workers, queue, health) = pool(2, Duration::from_secs(30), job);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(health.check(), Ok(()), "idle past the liveness window");
    let held = gate.lock().unwrap();
    queue.add(1);
    assert!(eventually(|| health
        .check()
        .is_err_and(|e| e.contains("worker-0"))));
    drop(held);
    assert!(eventually(|| health.check().is_ok()));
    assert!(workers.shut_down(Duration::from_secs(2)));
}

#[test]
fn shutdown_waits_for_the_job_in_flight_and_no_longer() {
    let (job, _, done) = slow_jobs();
    let (workers, queue, _) = pool(1, Duration::from_secs(30), job);
    queue.add(1);
    assert!(eventually(|| queue.is_empty()));
    assert!(
        workers.shut_down(Duration::from_secs(2)),
        "the job ended in time"
    );
    assert_eq!(done.load(Ordering::SeqCst), 1);
    assert_eq!(workers.live(), 0);

    let gate = Arc::new(Mutex::new(()));
    let (g, held) = (gate.clone(), gate.lock().unwrap());
    let job: Job<u32> = Arc::new(move |_: &u32| drop(g.lock()));
    let (workers, queue, _) = pool(1, Duration::from_secs(30), job);
    queue.add(1);
    assert!(eventually(|| queue.is_empty()));
    assert!(
        !workers.shut_down(Duration::from_millis(200)),
        "a job still running"
    );
    drop(held);
}
