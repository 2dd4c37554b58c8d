//! One executor for every kind of job the platform runs (agent runs, evaluations, optimization
//! trials; batch and fine-tuning jobs plug in the same way): the shared clock (`work_duration`
//! of running per job, under half a second of admission before it), pause and cancel, and the
//! `fail_next_job` control. A job kind supplies only what happens at each step (`Job`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// The kinds `fail_next_job` takes.
pub const JOB_KINDS: &[&str] = &["agent", "batch", "fine_tuning", "eval", "optimization"];

/// Time a job spends admitted (queued) before it runs; the CHOICES bound is 0.5 s.
const ADMISSION: Duration = Duration::from_millis(50);
/// How often a running job's clock is advanced (and pause/cancel noticed).
const TICK: Duration = Duration::from_millis(20);

/// What a job asks of the executor on each tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    Run,
    Pause,
    Stop,
}

/// The steps of one job. The executor calls `admitted`, then `started`, then (unless stopped)
/// `finish` with the failure planned for it, if any.
pub(crate) trait Job: Send + Sync + 'static {
    fn admitted(&self) {}
    fn started(&self);
    /// Checked on every tick: a paused job's clock stands still; a stopped one ends silently
    /// (its record was already moved, e.g. to `canceled`).
    fn control(&self) -> Control;
    /// `failure` is the error text of a planned failure; `failed_inputs` the inputs that must fail
    /// while the job still completes (batch).
    fn finish(&self, failure: Option<String>, failed_inputs: Vec<String>);
}

/// A planned failure (`fail_next_job`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Failure {
    pub error: Option<String>,
    pub failed_inputs: Vec<String>,
}

pub(crate) struct Executor {
    work_duration: Mutex<Duration>,
    planned: Mutex<HashMap<String, Failure>>,
    shutdown: CancellationToken,
}

impl Executor {
    pub fn new(work_duration: Duration, shutdown: CancellationToken) -> Self {
        Executor { work_duration: Mutex::new(work_duration), planned: Mutex::new(HashMap::new()), shutdown }
    }

    pub fn work_duration(&self) -> Duration {
        *self.work_duration.lock()
    }

    /// The next job of `kind` ends failed with `error`, or (batch) completes with `failed_inputs`
    /// failed. Refused, naming the argument, for an unknown kind and for a plan that would do
    /// nothing (no error and no input; an empty error; inputs of a kind that has none), so a
    /// test that meant a failure never passes on a job that quietly succeeded. Python and the
    /// control route both come here, so scripts in any process meet the same refusals.
    pub fn fail_next(&self, kind: &str, failure: Failure) -> Result<(), String> {
        if !JOB_KINDS.contains(&kind) {
            return Err(format!("kind is {kind:?}; it takes one of {}", JOB_KINDS.join(", ")));
        }
        if failure.error.as_deref().is_some_and(|e| e.trim().is_empty()) {
            return Err("error is empty; it takes the text the job fails with".to_string());
        }
        if failure.failed_inputs.iter().any(|id| id.is_empty()) {
            return Err("failed_inputs holds an empty file id".to_string());
        }
        if !failure.failed_inputs.is_empty() && kind != "batch" {
            return Err(format!(
                "failed_inputs is for batch jobs only (their inputs fail while the job completes); a {kind} job \
                 takes error"
            ));
        }
        if failure.error.is_none() && failure.failed_inputs.is_empty() {
            return Err(format!(
                "nothing to fail: give error (the next {kind} job fails with it){}",
                if kind == "batch" { " or failed_inputs (those inputs fail, the job completes)" } else { "" }
            ));
        }
        self.planned.lock().insert(kind.to_string(), failure);
        Ok(())
    }

    fn take_failure(&self, kind: &str) -> Failure {
        self.planned.lock().remove(kind).unwrap_or_default()
    }

    /// Runs `job` of `kind` on the current runtime, `duration` of running time (the shared
    /// `work_duration` when `None`). A planned failure of `kind` is this job's from now on: the
    /// next job made fails, not whichever job that was already running happens to end first.
    pub fn spawn(self: &Arc<Self>, kind: &'static str, job: Arc<dyn Job>, duration: Option<Duration>) {
        let failure = self.take_failure(kind);
        self.launch(job, duration, failure);
    }

    /// Runs the next step of a job already under way (an optimization's next trial): a failure
    /// planned meanwhile is for the next job made, not for this one.
    pub fn continue_with(self: &Arc<Self>, job: Arc<dyn Job>, duration: Option<Duration>) {
        self.launch(job, duration, Failure::default());
    }

    fn launch(self: &Arc<Self>, job: Arc<dyn Job>, duration: Option<Duration>, failure: Failure) {
        let executor = self.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = executor.drive(job, duration, failure) => {}
            }
        });
    }

    async fn drive(&self, job: Arc<dyn Job>, duration: Option<Duration>, failure: Failure) {
        tokio::time::sleep(ADMISSION).await;
        if job.control() == Control::Stop {
            return;
        }
        job.admitted();
        tokio::time::sleep(ADMISSION).await;
        job.started();
        let needed = duration.unwrap_or_else(|| self.work_duration());
        let mut ran = Duration::ZERO;
        while ran < needed {
            tokio::time::sleep(TICK.min(needed - ran)).await;
            match job.control() {
                Control::Stop => return,
                Control::Pause => continue,
                Control::Run => ran += TICK,
            }
        }
        job.finish(failure.error, failure.failed_inputs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU8, Ordering};

    struct Probe {
        control: Mutex<Control>,
        steps: Mutex<Vec<String>>,
        finished: AtomicU8,
    }

    impl Job for Probe {
        fn admitted(&self) {
            self.steps.lock().push("admitted".into());
        }
        fn started(&self) {
            self.steps.lock().push("started".into());
        }
        fn control(&self) -> Control {
            *self.control.lock()
        }
        fn finish(&self, failure: Option<String>, _: Vec<String>) {
            self.steps.lock().push(failure.unwrap_or_else(|| "ok".into()));
            self.finished.store(1, Ordering::SeqCst);
        }
    }

    fn probe() -> Arc<Probe> {
        Arc::new(Probe { control: Mutex::new(Control::Run), steps: Mutex::new(vec![]), finished: AtomicU8::new(0) })
    }

    #[tokio::test]
    async fn runs_pauses_and_fails_as_planned() {
        let ex = Arc::new(Executor::new(Duration::from_millis(60), CancellationToken::new()));
        assert!(ex.fail_next("nonsense", Failure::default()).is_err());
        ex.fail_next("agent", Failure { error: Some("boom".into()), failed_inputs: vec![] }).unwrap();
        let (a, b) = (probe(), probe());
        ex.spawn("agent", a.clone(), None);
        *b.control.lock() = Control::Pause;
        ex.spawn("eval", b.clone(), None);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(*a.steps.lock(), ["admitted", "started", "boom"]);
        assert_eq!(b.finished.load(Ordering::SeqCst), 0, "a paused job does not finish");
        *b.control.lock() = Control::Run;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(b.steps.lock().last().map(String::as_str), Some("ok"), "the failure was for one agent only");
    }

    #[test]
    fn a_plan_that_would_fail_nothing_is_refused_naming_the_argument() {
        let ex = Executor::new(Duration::from_millis(40), CancellationToken::new());
        let plan = |error: Option<&str>, inputs: &[&str]| Failure {
            error: error.map(str::to_string),
            failed_inputs: inputs.iter().map(|s| s.to_string()).collect(),
        };
        for (kind, failure, named) in [
            ("batch", plan(None, &[]), "error"),
            ("fine_tuning", plan(None, &["idle.csv"]), "failed_inputs"),
            ("agent", plan(Some("x"), &["a.csv"]), "failed_inputs"),
            ("batch", plan(Some(" "), &[]), "error"),
            ("batch", plan(None, &[""]), "failed_inputs"),
            ("BATCH", plan(Some("x"), &[]), "kind"),
        ] {
            let refused = ex.fail_next(kind, failure).expect_err(kind);
            assert!(refused.contains(named), "{kind}: {refused}");
        }
        assert!(ex.planned.lock().is_empty(), "a refused plan is not kept");
        ex.fail_next("batch", plan(None, &["pump_loud.csv"])).expect("batch inputs");
        ex.fail_next("fine_tuning", plan(Some("diverged"), &[])).expect("a fine-tuning error");
    }

    #[tokio::test]
    async fn the_failure_goes_to_the_next_job_made_not_to_one_already_running() {
        let ex = Arc::new(Executor::new(Duration::from_millis(40), CancellationToken::new()));
        let (running, next) = (probe(), probe());
        ex.spawn("batch", running.clone(), None);
        ex.fail_next("batch", Failure { error: Some("planned".into()), failed_inputs: vec![] }).unwrap();
        ex.spawn("batch", next.clone(), Some(Duration::from_millis(200)));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(running.steps.lock().last().map(String::as_str), Some("ok"));
        assert_eq!(next.steps.lock().last().map(String::as_str), Some("planned"));
    }
}
