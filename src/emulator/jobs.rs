//! One executor for every kind of job the platform runs (agent runs, evaluations, optimization
//! trials; batch and fine-tuning jobs plug in the same way): the shared clock (`work_duration`
//! of running per job, under half a second of admission before it), pause and cancel, and the
//! `fail_next_job` control. A job kind supplies only what happens at each step (`Job`).

use std::collections::{HashMap, VecDeque};
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
/// `finish` with the failure planned for it, if any. A job paused before it started (during
/// admission) is neither admitted nor started until it is resumed: its clock stands still from
/// the first step, as a running job's does.
pub(crate) trait Job: Send + Sync + 'static {
    fn admitted(&self) {}
    fn started(&self);
    /// Checked on every tick: a paused job's clock stands still; a stopped one ends silently
    /// (its record was already moved, e.g. to `canceled`).
    fn control(&self) -> Control;
    /// `plan` is the failure planned for this job (`Failure::default()`: none).
    fn finish(&self, plan: Failure);
}

/// A planned failure (`fail_next_job`): `error`, the text the job fails with; `failed_inputs`,
/// the inputs that fail while the job still completes (batch); `outcome`, the `outcome` a
/// fine-tuning job completes with instead of `SUCCESS` (`PARTIAL` or `FAILED`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Failure {
    pub error: Option<String>,
    pub failed_inputs: Vec<String>,
    pub outcome: Option<String>,
}

/// The outcomes `fail_next_job(..., outcome=)` takes: the spec's outcomes of a `COMPLETED`
/// fine-tuning job other than `SUCCESS`.
pub const OUTCOMES: &[&str] = &["PARTIAL", "FAILED"];

pub(crate) struct Executor {
    work_duration: Mutex<Duration>,
    /// The plans of each kind, oldest first: each fails exactly one job, in the order planned
    /// (a second plan queues behind the first rather than replacing it).
    planned: Mutex<HashMap<String, VecDeque<Failure>>>,
    shutdown: CancellationToken,
}

impl Executor {
    pub fn new(work_duration: Duration, shutdown: CancellationToken) -> Self {
        Executor { work_duration: Mutex::new(work_duration), planned: Mutex::new(HashMap::new()), shutdown }
    }

    pub fn work_duration(&self) -> Duration {
        *self.work_duration.lock()
    }

    /// A job of `kind` ends failed with `error`, or (batch) completes with `failed_inputs`
    /// failed, or (fine-tuning) completes with `outcome`. Plans of one kind queue: each goes to
    /// the next job of that kind to run (a batch retry included), in the order they were made.
    /// Refused, naming the argument, for an unknown kind and for a plan that would do nothing
    /// (no error and no input; an empty error; inputs of a kind that has none) or could not be
    /// carried out (an outcome other than PARTIAL/FAILED, for a kind other than fine-tuning, or
    /// with an error as well), so a test that meant a failure never passes on a job that quietly
    /// succeeded. Python and the control route both come here, so scripts in any process meet
    /// the same refusals.
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
                "failed_inputs is for batch jobs only (their inputs fail while the job completes); {kind} jobs \
                 take error"
            ));
        }
        if let Some(outcome) = &failure.outcome {
            if kind != "fine_tuning" {
                return Err(format!(
                    "outcome is for fine_tuning jobs only (they complete with it); {kind} jobs take error"
                ));
            }
            if !OUTCOMES.contains(&outcome.as_str()) {
                return Err(format!(
                    "outcome is {outcome:?}; it takes {} (a completed job's outcome other than SUCCESS)",
                    OUTCOMES.join(" or ")
                ));
            }
            if failure.error.is_some() {
                return Err(
                    "outcome and error together: error makes the job FAILED, outcome makes it COMPLETED with that \
                     outcome; give one"
                        .to_string(),
                );
            }
        }
        if failure.error.is_none() && failure.failed_inputs.is_empty() && failure.outcome.is_none() {
            return Err(format!(
                "nothing to fail: give error (the next {kind} job fails with it){}",
                match kind {
                    "batch" => " or failed_inputs (those inputs fail, the job completes)",
                    "fine_tuning" => " or outcome (the job completes with it)",
                    _ => "",
                }
            ));
        }
        self.planned.lock().entry(kind.to_string()).or_default().push_back(failure);
        Ok(())
    }

    fn take_failure(&self, kind: &str) -> Failure {
        let mut planned = self.planned.lock();
        let Some(queue) = planned.get_mut(kind) else { return Failure::default() };
        let next = queue.pop_front().unwrap_or_default();
        if queue.is_empty() {
            planned.remove(kind);
        }
        next
    }

    /// Runs `job` of `kind` on the current runtime, `duration` of running time (the shared
    /// `work_duration` when `None`). The oldest planned failure of `kind` is this job's from now
    /// on: the next job to run fails, not whichever job that was already running happens to end
    /// first. A batch retry comes here too: it is a new execution of the job, so it takes the
    /// next plan as a new job would.
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

    /// Waits out a pause before a step; `false` when the job was stopped meanwhile.
    async fn until_running(job: &dyn Job) -> bool {
        loop {
            match job.control() {
                Control::Run => return true,
                Control::Stop => return false,
                Control::Pause => tokio::time::sleep(TICK).await,
            }
        }
    }

    async fn drive(&self, job: Arc<dyn Job>, duration: Option<Duration>, failure: Failure) {
        // Each admission step waits for a pause to end first: a job paused while queued is not
        // admitted or started (no `started_at`, no "started" log after "paused") until resumed.
        tokio::time::sleep(ADMISSION).await;
        if !Self::until_running(job.as_ref()).await {
            return;
        }
        job.admitted();
        tokio::time::sleep(ADMISSION).await;
        if !Self::until_running(job.as_ref()).await {
            return;
        }
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
        job.finish(failure);
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
        fn finish(&self, plan: Failure) {
            self.steps.lock().push(plan.error.or(plan.outcome).unwrap_or_else(|| "ok".into()));
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
        ex.fail_next("agent", Failure { error: Some("boom".into()), ..Failure::default() }).unwrap();
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
            outcome: None,
        };
        let outcome = |kind_outcome: &str, error: Option<&str>| Failure {
            outcome: Some(kind_outcome.to_string()),
            error: error.map(str::to_string),
            failed_inputs: vec![],
        };
        for (kind, failure, named) in [
            ("batch", plan(None, &[]), "error"),
            ("fine_tuning", plan(None, &["idle.csv"]), "failed_inputs"),
            ("agent", plan(Some("x"), &["a.csv"]), "failed_inputs"),
            ("batch", plan(Some(" "), &[]), "error"),
            ("batch", plan(None, &[""]), "failed_inputs"),
            ("BATCH", plan(Some("x"), &[]), "kind"),
            ("batch", outcome("PARTIAL", None), "outcome"),
            ("agent", outcome("FAILED", None), "outcome"),
            ("fine_tuning", outcome("SUCCESS", None), "outcome"),
            ("fine_tuning", outcome("partial", None), "outcome"),
            ("fine_tuning", outcome("FAILED", Some("diverged")), "error"),
        ] {
            let refused = ex.fail_next(kind, failure).expect_err(kind);
            assert!(refused.contains(named), "{kind}: {refused}");
        }
        assert!(ex.planned.lock().is_empty(), "a refused plan is not kept");
        ex.fail_next("batch", plan(None, &["pump_loud.csv"])).expect("batch inputs");
        ex.fail_next("fine_tuning", plan(Some("diverged"), &[])).expect("a fine-tuning error");
        ex.fail_next("fine_tuning", outcome("PARTIAL", None)).expect("a fine-tuning outcome");
    }

    #[tokio::test]
    async fn plans_of_one_kind_queue_and_each_fails_one_job_in_order() {
        let ex = Arc::new(Executor::new(Duration::from_millis(40), CancellationToken::new()));
        ex.fail_next("agent", Failure { error: Some("first".into()), ..Failure::default() }).unwrap();
        ex.fail_next("agent", Failure { error: Some("second".into()), ..Failure::default() }).unwrap();
        ex.fail_next("eval", Failure { error: Some("an eval's".into()), ..Failure::default() }).unwrap();
        let jobs = [probe(), probe(), probe()];
        for job in &jobs {
            ex.spawn("agent", job.clone(), None);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ends: Vec<String> = jobs.iter().map(|j| j.steps.lock().last().cloned().unwrap_or_default()).collect();
        assert_eq!(ends, ["first", "second", "ok"], "each plan failed one job, in order");
        assert_eq!(ex.take_failure("eval").error.as_deref(), Some("an eval's"), "another kind's plan is its own");
        assert!(ex.planned.lock().is_empty());
    }

    #[tokio::test]
    async fn a_job_paused_during_admission_is_neither_admitted_nor_started_until_resumed() {
        let ex = Arc::new(Executor::new(Duration::from_millis(40), CancellationToken::new()));
        let job = probe();
        *job.control.lock() = Control::Pause;
        ex.spawn("agent", job.clone(), None);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(job.steps.lock().is_empty(), "paused while queued: {:?}", job.steps.lock());
        *job.control.lock() = Control::Run;
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(*job.steps.lock(), ["admitted", "started", "ok"]);
    }

    #[tokio::test]
    async fn the_failure_goes_to_the_next_job_made_not_to_one_already_running() {
        let ex = Arc::new(Executor::new(Duration::from_millis(40), CancellationToken::new()));
        let (running, next) = (probe(), probe());
        ex.spawn("batch", running.clone(), None);
        ex.fail_next("batch", Failure { error: Some("planned".into()), ..Failure::default() }).unwrap();
        ex.spawn("batch", next.clone(), Some(Duration::from_millis(200)));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(running.steps.lock().last().map(String::as_str), Some("ok"));
        assert_eq!(next.steps.lock().last().map(String::as_str), Some("planned"));
    }
}
