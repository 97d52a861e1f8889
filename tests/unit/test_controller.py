"""The shell (controller.py) on a fake clock: what wakes a job, one record per job,
expectations, retries with back-off, deferred counter writes, TTL, and a deleted job
dropped without an API call. The API is a recording stand-in (fake_kube.py says why);
the same passes run against the real control plane in tests/cluster."""

from __future__ import annotations

import asyncio
import dataclasses

from disttrain.api import load_job
from disttrain.operator.controller import Controller
from disttrain.operator.trainers import SILENT_TRAINER_MAX_SECONDS, silent_poll_seconds
from disttrain.operator.kube import ApiError
from disttrain.operator.metrics import OperatorMetrics
from disttrain.operator.core.writes import COUNTERS_DELAY_SECONDS, PENDING_COUNTERS_DELAY_SECONDS, status_write
from disttrain.operator.core.state import Policy
from disttrain.operator.core.plan import decide
from disttrain.operator.core.pods import PodInfo
from disttrain.operator.record import JobRecord
from disttrain.render import TEMPLATE_HASH_ANNOTATION, render_pod
from disttrain.render.network_policy import NetworkPolicySettings
from disttrain.operator.settings import Settings

from .fake_clock import FakeClock, settle
from .fake_kube import FakeKube
from .helpers import job as job_doc
from .helpers import typed, written

KEY = ("team-a", "demo")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def body(uid: str = "u1", generation: int = 1, deleting: bool = False, status: dict | None = None,
         **spec) -> dict:
    doc = job_doc(**{"nodes": 2, "trainer": {"builtin": {"steps": 10}}, **spec})
    doc["metadata"].update(uid=uid, generation=generation, creationTimestamp="2026-11-24T12:00:00Z")
    if deleting:
        doc["metadata"]["deletionTimestamp"] = "2026-11-24T12:00:00Z"
    doc["status"] = status or {}
    return doc


def info(name: str, owner: str | None = "u1", uid: str | None = None, terminating: bool = False,
         phase: str = "Running", ready: bool = True, template: str | None = None, ip: str | None = None) -> PodInfo:
    return PodInfo(name=name, index=int(name.rsplit("-", 1)[1]), phase=phase, ready=ready,
                   terminating=terminating, disrupted=False, exit_code=None, reason="", template_hash=template,
                   ip=ip, uid=uid or f"uid-{name}", owner_uid=owner)


def controller(kube: FakeKube | None = None, clock: FakeClock | None = None, **settings) -> Controller:
    shell = Controller(settings=Settings(**settings), kube=kube or FakeKube({KEY: "u1"}), metrics=OperatorMetrics(),
                       policy=Policy(backoff_base_seconds=1, backoff_max_seconds=4), clock=clock or FakeClock())
    shell.pods_index = {}
    return shell


def with_job(doc: dict | None = None, kube: FakeKube | None = None, **settings) -> tuple[Controller, FakeKube,
                                                                                      FakeClock]:
    """A shell on a fake clock that has just seen the job `doc` (default: body()) appear."""
    clock, kube = FakeClock(), kube or FakeKube({KEY: "u1"})
    shell = controller(kube, clock, **settings)
    shell.job_event(KEY, doc or body(), "ADDED")
    return shell, kube, clock


async def reconciled(shell: Controller) -> float | None:
    """One pass, and the creations it started in the background carried out."""
    again = await shell.reconcile(KEY)
    await shell.settled()
    return again


def template_hash(nodes: int = 2) -> str:
    j, r, _ = load_job(job_doc(nodes=nodes, trainer={"builtin": {"steps": 10}}))
    return render_pod(j, r, 0)["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]


# ---- the record: expectations and ownership --------------------------------------------


def test_a_pod_asked_for_counts_as_present_until_the_watch_shows_it():
    rec = JobRecord(uid="u1", key=KEY)
    rec.expect_create("demo-worker-1", "abc", now=0)
    pods, _ = rec.own_pods([info("demo-worker-0")], now=1)
    assert [(p.name, p.phase) for p in pods] == [("demo-worker-0", "Running"), ("demo-worker-1", "Pending")]
    pods, _ = rec.own_pods([info("demo-worker-0"), info("demo-worker-1")], now=2)
    assert [p.uid for p in pods] == ["uid-demo-worker-0", "uid-demo-worker-1"]
    assert rec.expected_creates == {}


def test_an_expectation_the_watch_never_confirms_expires_after_30_seconds():
    rec = JobRecord(uid="u1", key=KEY)
    rec.expect_create("demo-worker-1", "abc", now=0)
    assert len(rec.own_pods([], now=29.9)[0]) == 1
    assert rec.own_pods([], now=30.1)[0] == [] and rec.expected_creates == {}


def test_a_pod_just_created_is_neither_created_again_nor_replaced_as_outdated():
    """The placeholder carries the template it was rendered from: decide must not take it
    for a pod of an older spec (that deleted every fresh pod under load)."""
    from disttrain.api import validate_document
    from disttrain.operator.core.state import JobState

    rec = JobRecord(uid="u1", key=KEY)
    rec.expect_create("demo-worker-1", template_hash(), now=0)
    pods, _ = rec.own_pods([info("demo-worker-0", template=template_hash())], now=1)
    state = JobState(name="demo", namespace="team-a", generation=1, status=typed(),
                     validation=validate_document(job_doc(nodes=2, trainer={"builtin": {"steps": 10}})))
    plan = decide(state, pods, FakeClock().now(), Policy())
    assert plan.create == [] and plan.delete == []


def test_a_pod_we_deleted_counts_as_terminating_until_the_watch_shows_it():
    rec = JobRecord(uid="u1", key=KEY)
    rec.expect_delete("uid-demo-worker-0", now=0)
    pods, _ = rec.own_pods([info("demo-worker-0")], now=1)
    assert pods[0].terminating and not pods[0].active
    rec.own_pods([info("demo-worker-0", terminating=True)], now=2)
    assert rec.expected_deletes == {}


def test_only_pods_owned_by_the_jobs_uid_are_its_own():
    rec = JobRecord(uid="u1", key=KEY)
    pods, foreign = rec.own_pods([info("demo-worker-0", owner="old"), info("demo-worker-1", owner=None),
                                  info("demo-worker-2")], now=0)
    assert [p.name for p in pods] == ["demo-worker-2"]
    assert [p.name for p in foreign] == ["demo-worker-0", "demo-worker-1"]


# ---- what the watch tells ------------------------------------------------------------


def test_a_job_is_queued_on_spec_changes_and_deletion_not_on_its_own_status_writes():
    async def scenario():
        shell = controller()
        queued = []
        for b in (body(), body(status={"phase": "Running"}), body(generation=2),
                  body(generation=2, deleting=True), body(uid="u2")):
            shell.job_event(KEY, b, "MODIFIED")
            queued.append(shell.queue.pending(KEY))
            if queued[-1]:
                shell.queue.done(await shell.queue.get())
        return queued

    assert run(scenario()) == [True, False, True, True, True]


def test_a_job_deleted_while_queued_is_dropped_without_an_api_call():
    async def scenario():
        kube = FakeKube({KEY: "u1"})
        shell = controller(kube)
        shell.job_event(KEY, body(), "ADDED")
        shell.job_event(KEY, body(), "DELETED")
        worker = asyncio.create_task(shell.run(workers=2))
        await settle()
        shell.shutdown()
        await worker
        return kube.calls, shell.jobs, shell.records, shell.queue.pending(KEY)

    calls, jobs, records, pending = run(scenario())
    assert calls == [] and jobs == {} and records == {} and pending is False


def test_a_new_job_gets_its_service_and_workers_after_the_job_is_read_once():
    async def scenario():
        kube = FakeKube({KEY: "u1"})
        shell = controller(kube)
        shell.job_event(KEY, body(), "ADDED")
        again = await reconciled(shell)
        await settle()
        return kube.calls, again

    calls, again = run(scenario())
    creates = [c for c in calls if c[0] in ("get-job", "get", "create")]
    assert creates == [("get-job", "team-a", "demo"), ("get", "Service", "demo"), ("create", "Service", "demo"),
                       ("get", "PodDisruptionBudget", "demo"), ("create", "PodDisruptionBudget", "demo"),
                       ("create", "Pod", "demo-worker-0"), ("create", "Pod", "demo-worker-1")]
    assert ("patch-status", "demo", "conditions", "goodput", "observedGeneration", "phase", "resolved", "restarts",
            "selector", "startTime", "warnings", "workers") in calls
    assert again == Settings().resync_seconds  # nothing due sooner: the next look is the resync


def test_every_create_of_a_jobs_children_is_paid_for_by_its_one_batch():
    """The Service, NetworkPolicy, PodDisruptionBudget and pods go out as one paced batch:
    a write left out of the count would wait for a token behind every other job's batch."""
    async def scenario():
        kube = FakeKube({KEY: "u1"})
        shell = controller(kube)
        shell.network_policy = NetworkPolicySettings()
        shell.job_event(KEY, body(nodes=4), "ADDED")
        await reconciled(shell)
        return kube.batches, kube.verbs("create")

    batches, creates = run(scenario())
    assert [kind for _verb, kind, _name in creates] == ["Service", "NetworkPolicy", "PodDisruptionBudget"] + ["Pod"] * 4
    assert batches == [[7, 7]]


def test_a_job_gone_from_the_api_is_never_given_pods():
    """A deleted CRD takes every job with it, and its watch may end before their DELETED
    events: the pass that would create pods reads the job first and forgets it instead."""
    async def scenario():
        kube = FakeKube({})  # the job is not in the API any more
        shell = controller(kube)
        shell.job_event(KEY, body(), "ADDED")
        await reconciled(shell)
        return kube.verbs("create", "patch-status"), shell.jobs, shell.records

    writes, jobs, records = run(scenario())
    assert writes == [] and jobs == {} and records == {}


def test_a_deleted_service_is_restored_when_workers_are_created_again():
    async def scenario():
        kube = FakeKube({KEY: "u1"})
        shell = controller(kube)
        shell.job_event(KEY, body(), "ADDED")
        await reconciled(shell)
        del kube.objects[("Service", "team-a", "demo")]  # someone deleted it
        kube.objects.pop(("Pod", "team-a", "demo-worker-1"))
        shell.pods_index = {KEY: [info("demo-worker-0", template=template_hash())]}
        await shell.clock.advance(31)  # the creation expectations expire: worker 1 is missing
        kube.calls.clear()
        await reconciled(shell)
        return kube.verbs("create")

    assert run(scenario()) == [("create", "Service", "demo"), ("create", "Pod", "demo-worker-1")]


# ---- failures and back-off -----------------------------------------------------------


def test_a_failing_pass_is_retried_after_half_a_second_then_doubling_and_reset_by_a_success():
    async def scenario():
        clock = FakeClock()
        kube = FakeKube({KEY: "u1"})
        kube.fail["patch-status"] = ApiError(500, "InternalError", "etcd is slow", "writing status")
        shell = controller(kube, clock)
        shell.job_event(KEY, body(), "ADDED")
        worker = asyncio.create_task(shell.run(workers=2))
        moments = []
        for _ in range(1200):  # 12 s in steps of 10 ms
            before = len(kube.verbs("patch-status"))
            await clock.advance(0.01)
            if len(kube.verbs("patch-status")) > before:
                moments.append(round(clock.monotonic() - 1000, 2))
            if len(moments) == 5:
                break
        retries = shell.queue.limiter.retries(KEY)
        del kube.fail["patch-status"]
        await clock.advance(20)
        after = shell.queue.limiter.retries(KEY)
        shell.shutdown()
        await worker
        return moments, retries, after

    moments, retries, after = run(scenario())
    gaps = [round(b - a, 2) for a, b in zip(moments, moments[1:])]
    assert gaps == [0.5, 1.0, 2.0, 4.0]  # then 8, and 10 s from there on
    assert retries == 5 and after == 0  # the success reset the key's back-off


def test_a_status_the_api_refuses_does_not_stop_the_pass():
    """A status write refused as invalid (a 422) is logged and counted; the pods the pass
    decided on are created all the same, and the record keeps the decision, so the job
    moves on instead of deciding the same thing forever."""
    async def scenario():
        kube = FakeKube({KEY: "u1"})
        kube.fail["patch-status"] = ApiError(422, "Invalid", "status.progress.step: Invalid value", "writing status")
        shell = controller(kube)
        shell.job_event(KEY, body(), "ADDED")
        again = await reconciled(shell)
        errors = shell.metrics.reconcile_errors.labels(reason="Api422")._value.get()
        return kube.verbs("create"), again, errors, shell.records["u1"].last_status.phase

    creates, again, errors, remembered = run(scenario())
    assert [c[2] for c in creates] == ["demo", "demo", "demo-worker-0", "demo-worker-1"]  # Service, budget, pods
    assert errors == 1 and remembered == "Pending"
    assert again == Settings().resync_seconds


# ---- status writes ---------------------------------------------------------------------


def test_counter_changes_alone_wait_while_the_job_runs_but_never_once_it_stopped():
    running = typed({"phase": "Running", "workers": {"desired": 2, "active": 2}})
    fewer = typed({"phase": "Running", "workers": {"desired": 2, "active": 1}})
    assert status_write(running, fewer, since_last_write=5) == ({}, COUNTERS_DELAY_SECONDS - 5)
    assert status_write(running, fewer, since_last_write=30) == ({"workers": {"desired": 2, "active": 1}}, None)
    # Suspended with pods still going: the counters follow at once, never "2 active".
    suspended = typed({"phase": "Suspended", "workers": {"desired": 0, "active": 2}})
    gone = typed({"phase": "Suspended", "workers": {"desired": 0, "active": 0}})
    assert status_write(suspended, gone, since_last_write=1) == ({"workers": {"desired": 0, "active": 0}}, None)
    assert status_write(running, typed(written(running)), since_last_write=1) == ({}, None)
    # Anything else goes out at once, in the JSON form the API server stores.
    assert status_write(running, typed({"phase": "Failed", "workers": {"desired": 2, "active": 2}}),
                        since_last_write=1) == ({"phase": "Failed"}, None)


def test_a_pending_jobs_counters_alone_wait_for_its_phase_change_or_five_minutes():
    """Pods appearing and starting move a Pending job's counters; the write of Running
    carries them, so a burst of jobs does not spend write tokens its pods' creates need."""
    pending = typed({"phase": "Pending", "workers": {"desired": 8, "active": 0}})
    created = typed({"phase": "Pending", "workers": {"desired": 8, "active": 8}})
    assert PENDING_COUNTERS_DELAY_SECONDS > COUNTERS_DELAY_SECONDS
    assert status_write(pending, created, since_last_write=60) == ({}, PENDING_COUNTERS_DELAY_SECONDS - 60)
    assert status_write(pending, created, since_last_write=PENDING_COUNTERS_DELAY_SECONDS) == (
        {"workers": {"desired": 8, "active": 8}}, None)
    # The phase change carries the counters at once, however soon after the last write.
    running = typed({"phase": "Running", "workers": {"desired": 8, "active": 8, "ready": 8}})
    patch, wait = status_write(pending, running, since_last_write=1)
    assert wait is None and patch == {"phase": "Running", "workers": {"desired": 8, "active": 8, "ready": 8}}


def test_a_deferred_counter_write_goes_out_when_it_is_due():
    async def scenario():
        shell, kube, clock = with_job()
        h = template_hash()
        shell.pods_index = {KEY: [info("demo-worker-0", template=h), info("demo-worker-1", template=h)]}
        await reconciled(shell)  # Running, both counted
        phase_write_routine = list(kube.routine_writes)
        shell.pods_index = {KEY: [info("demo-worker-0", template=h),
                                  info("demo-worker-1", template=h, ready=False)]}
        await clock.advance(1)
        kube.calls.clear()
        wait = await reconciled(shell)
        deferred = kube.verbs("patch-status")
        await clock.advance(wait)
        await reconciled(shell)
        return wait, deferred, kube.verbs("patch-status"), phase_write_routine, kube.routine_writes

    wait, deferred, written, phase_write_routine, routine = run(scenario())
    assert deferred == [] and wait == COUNTERS_DELAY_SECONDS - 1
    assert written == [("patch-status", "demo", "goodput", "workers")]  # goodput rides along with it
    # The write of Running is urgent; the counters alone give way to it (pacing.ROUTINE).
    assert phase_write_routine == [] and routine == ["demo"]


def test_a_phase_change_is_logged_with_where_its_time_went(caplog):
    """From the pod change to the patch: the watch, the wait for a worker, the pass."""
    async def scenario():
        shell, _kube, clock = with_job()
        key = await shell.queue.get()
        await reconciled(shell)  # Pending, its pods asked for
        shell.queue.done(key)
        h = template_hash()
        shell.pods_index = {KEY: [info("demo-worker-0", template=h), info("demo-worker-1", template=h)]}
        shell.pod_event(KEY)
        await clock.advance(0.05)  # coalescing
        await clock.advance(1.5)  # every worker busy
        key = await shell.queue.get()
        with caplog.at_level("INFO", logger="disttrain.controller"):
            await shell.reconcile(key)
        shell.queue.done(key)

    run(scenario())
    assert [r.getMessage() for r in caplog.records if "phase" in r.getMessage()] == [
        "team-a/demo: phase Pending -> Running; the pods changed 1.550s before the pass, which had waited 1.500s "
        "for a worker and took 0.000s to decide; the patch took 0.000s"]


def test_a_finished_job_is_deleted_when_its_ttl_runs_out():
    async def scenario():
        clock = FakeClock()
        kube = FakeKube({KEY: "u1"})
        shell = controller(kube, clock)
        done = {"phase": "Succeeded", "completionTime": "2026-11-24T12:00:00Z", "restarts": 0}
        shell.job_event(KEY, body(status=done, ttlSecondsAfterFinished=10), "ADDED")
        first = await reconciled(shell)
        await clock.advance(first)
        await reconciled(shell)
        return first, kube.verbs("delete-job")

    first, deleted = run(scenario())
    assert first == 10.5 and deleted == [("delete-job", "team-a", "demo")]


def test_a_quiet_job_is_checked_to_still_exist_once_a_resync_period():
    async def scenario():
        shell, kube, clock = with_job(resync_seconds=60)
        await reconciled(shell)
        await clock.advance(10)
        await reconciled(shell)  # an event-driven pass: no read
        reads = len(kube.verbs("get-job"))
        del kube.jobs[KEY]  # deleted, and the watch never said so
        await clock.advance(61)
        again = await reconciled(shell)
        return reads, again, shell.jobs

    reads, again, jobs = run(scenario())
    assert reads == 1 and again is None and jobs == {}


# ---- the trainer's /status -------------------------------------------------------------


def test_a_running_job_is_polled_and_a_report_that_moved_queues_it():
    async def scenario():
        shell, kube, clock = with_job(progress_seconds=15)
        h = template_hash()
        shell.pods_index = {KEY: [info("demo-worker-0", template=h, ip="10.0.0.1"),
                                  info("demo-worker-1", template=h, ip="10.0.0.2")]}
        await reconciled(shell)
        scheduled = shell.polls.due_in(KEY)
        kube.reports["10.0.0.1"] = {"step": 3, "totalSteps": 10}
        key = await shell.queue.get() if len(shell.queue) else None
        again = await shell.trainers.poll(KEY)
        return scheduled, key, again, shell.queue.pending(KEY), shell.records["u1"].report.step

    scheduled, _key, again, queued, step = run(scenario())
    assert scheduled == 15 and again == 15 and queued and step == 3


def test_no_ready_worker_to_ask_is_no_silence_of_the_trainer():
    """A pod can be Running (so the job is) before its readiness probe passes: polls that
    find nobody to ask come back at the period, so the first report is read as soon as a
    worker is ready, not after a back-off grown while it started."""
    async def scenario():
        shell, kube, clock = with_job(progress_seconds=1)
        h = template_hash()
        shell.pods_index = {KEY: [info("demo-worker-0", template=h, ip="10.0.0.1", ready=False),
                                  info("demo-worker-1", template=h, ip=None)]}
        await reconciled(shell)
        waits = [await shell.trainers.poll(KEY) for _ in range(6)]
        asked = len(kube.verbs("status"))
        shell.pods_index = {KEY: [info("demo-worker-0", template=h, ip="10.0.0.1")]}
        kube.reports["10.0.0.1"] = {"step": 1}
        await shell.trainers.poll(KEY)
        return waits, asked, shell.records["u1"].silent_polls, shell.records["u1"].report.step

    waits, asked, silent, step = run(scenario())
    assert waits == [1] * 6 and asked == 0 and silent == 0 and step == 1


def test_a_silent_trainer_is_polled_less_and_less_often_up_to_a_cap():
    assert [silent_poll_seconds(15, n) for n in range(7)] == [15, 15, 30, 60, 120, 120, 120]
    assert SILENT_TRAINER_MAX_SECONDS == 120
    assert silent_poll_seconds(300, 5) == 300  # a longer configured period is never shortened


def test_a_spec_is_validated_once_per_generation():
    shell = controller()
    rec = JobRecord(uid="u1", key=KEY)
    from disttrain.operator.controller import WatchedJob

    first, _ = shell.validate(WatchedJob.of(body()), rec, KEY, typed())
    assert shell.validate(WatchedJob.of(body(status={"phase": "Running"})), rec, KEY, typed())[0] is first
    assert shell.validate(WatchedJob.of(body(generation=2)), rec, KEY, typed())[0] is not first


def test_a_job_without_an_image_runs_the_operators_trainer_image_and_keeps_it():
    """DISTTRAIN_TRAINER_IMAGE (the chart's trainerImage) for a job that names none, recorded
    in status.resolved.image; an operator restarted with another image keeps the job's."""
    ours, newer = "registry.example.com/ml/trainer:0.1.0", "registry.example.com/ml/trainer:0.2.0"

    async def first_pass(doc: dict, image: str) -> tuple[FakeKube, dict]:
        shell, kube, _clock = with_job(doc, trainer_image=image)
        await shell.queue.get()
        await reconciled(shell)
        return kube, shell.records["u1"].last_status

    kube, status = run(first_pass(body(), ours))
    assert {o["spec"]["containers"][0]["image"] for (k, _, _), o in kube.objects.items() if k == "Pod"} == {ours}
    assert status.resolved.image == ours
    # The operator comes back with a newer image; the job's status says what it ran.
    kube, status = run(first_pass(body(status=written(status)), newer))
    assert {o["spec"]["containers"][0]["image"] for (k, _, _), o in kube.objects.items() if k == "Pod"} == {ours}
    # A new job gets the newer one; a job that names its image gets its own.
    assert run(first_pass(body(), newer))[1].resolved.image == newer
    assert run(first_pass(body(image="mine:1"), newer))[1].resolved.image == "mine:1"


def test_deleting_a_job_forgets_everything_about_it():
    shell = controller()
    shell.job_event(KEY, body(), "ADDED")
    shell.records["u1"] = dataclasses.replace(JobRecord(uid="u1", key=KEY))
    shell.metrics.observe_phase(KEY, "Running")
    shell.job_event(KEY, body(), "DELETED")
    assert shell.records == {} and shell.jobs == {}
    assert shell.metrics.jobs.labels(phase="Running")._value.get() == 0


def test_the_phase_gauge_moves_one_job_at_a_time():
    metrics = OperatorMetrics()
    for i in range(3):
        metrics.observe_phase(("ns", f"j{i}"), "Pending")
    metrics.observe_phase(("ns", "j0"), "Running")
    metrics.observe_phase(("ns", "j0"), "Running")
    metrics.observe_phase(("ns", "j1"), None)
    values = {p: metrics.jobs.labels(phase=p)._value.get() for p in ("Pending", "Running")}
    assert values == {"Pending": 1, "Running": 1}


def test_a_job_past_its_active_deadline_fails_at_the_moment_the_pass_asked_to_look_again():
    async def scenario():
        shell, kube, clock = with_job(body(activeDeadlineSeconds=120))
        first = await reconciled(shell)  # creates the workers: the clock starts
        h = template_hash()
        shell.pods_index = {KEY: [info("demo-worker-0", template=h), info("demo-worker-1", template=h)]}
        await clock.advance(119)
        await reconciled(shell)
        before = shell.records["u1"].last_status.phase
        await clock.advance(2)
        await reconciled(shell)
        after = shell.records["u1"].last_status
        return first, before, after.phase, after.conditions[-1].reason if after.conditions else None

    first, before, after, _ = run(scenario())
    assert first == 60  # the resync comes first; the deadline is asked for once it is nearer
    assert before == "Running" and after == "Failed"


class SlowCreates(FakeKube):
    """Creates wait until the test lets them through: the write pacing of a busy operator."""

    def __init__(self, jobs):
        super().__init__(jobs)
        self.gate = asyncio.Event()

    async def create(self, obj):
        await self.gate.wait()
        return await super().create(obj)


def test_a_pass_never_waits_for_its_creates_and_a_second_pass_creates_nothing_twice():
    """Creates are paced for the whole operator: a worker that waited for one job's pods
    would hold every other job's status back (at 500 jobs the last pod Running -> Running
    lag was 98 s at p99 that way). The pass hands them to the background, counting the
    pods as present."""
    async def scenario():
        kube = SlowCreates({KEY: "u1"})
        shell, _, clock = with_job(kube=kube)
        await shell.reconcile(KEY)  # returns while its creates wait
        waiting = (shell.records["u1"].creating, kube.verbs("create"), kube.verbs("patch-status") != [])
        await shell.reconcile(KEY)  # another event meanwhile: the pods count as present
        kube.gate.set()
        await shell.settled()
        return waiting, kube.verbs("create"), shell.records["u1"].creating

    (creating, creates_while_waiting, status_written), creates, still = run(scenario())
    assert creating and creates_while_waiting == [] and status_written
    assert [c[2] for c in creates] == ["demo", "demo", "demo-worker-0", "demo-worker-1"] and still is False


def test_a_creation_that_fails_on_the_way_uncounts_the_pods_and_is_retried_with_back_off():
    async def scenario():
        kube = FakeKube({KEY: "u1"})
        kube.fail["create"] = ApiError(503, "ServiceUnavailable", "etcd leader changed", "creating")
        shell, _, clock = with_job(kube=kube)
        await reconciled(shell)
        rec = shell.records["u1"]
        return dict(rec.expected_creates), shell.queue.due_in(KEY), shell.queue.limiter.retries(KEY)

    expected, due, retries = run(scenario())
    assert expected == {} and due == 0.5 and retries == 1


def test_each_new_failure_counts_once_by_cause_and_goes_with_the_job():
    """disttrain_job_failures_total{namespace,job,cause}: one per entry of status.failures,
    however many passes see the failed pod; the job's series are removed when it is deleted."""
    async def scenario():
        shell, kube, clock = with_job()
        await reconciled(shell)
        h = template_hash()
        crashed = dataclasses.replace(info("demo-worker-1", template=h), phase="Failed", ready=False, exit_code=1,
                                      reason="Error")
        shell.pods_index = {KEY: [info("demo-worker-0", template=h), crashed]}
        for _ in range(3):
            await reconciled(shell)
            await clock.advance(2)
        return shell

    shell = run(scenario())
    counter = shell.metrics.worker_failures
    assert counter.labels(namespace="team-a", job="demo", cause="ExitCode")._value.get() == 1
    assert [f.cause for f in shell.records["u1"].last_status.failures] == ["ExitCode"]
    ratio = shell.metrics.goodput_ratio
    # No trainer reported a step: the ratio is unknown, and no gauge claims one (issue 70).
    assert shell.records["u1"].last_status.goodput.ratio is None
    assert not [s for m in ratio.collect() for s in m.samples if s.labels.get("job") == "demo"]
    shell.job_event(KEY, body(), "DELETED")
    for family in (counter, ratio, shell.metrics.lost_seconds):
        assert not [s for m in family.collect() for s in m.samples if s.labels.get("job") == "demo"]


def scraped(shell: Controller, prefix: str) -> dict[str, float]:
    """The operator's series as Prometheus scrapes them: {'name{labels}': value}."""
    from prometheus_client import generate_latest
    lines = generate_latest(shell.metrics.registry).decode().splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix)}


def test_steps_a_failure_undoes_are_lost_worker_seconds_by_cause_and_lower_the_goodput_ratio():
    """2 workers Running for 60 s (120 worker-seconds), the trainer at step 25 of 40 at 2 s a
    step (100 worker-seconds of steps; the rest start-up), its newest checkpoint step 22;
    then a worker exits 1. The 3 steps since the checkpoint are done again: 3 x 2 s x 2
    workers = 12 worker-seconds lost to ExitCode, and the ratio is 100 / 120. The scraped
    series are status.goodput's figures."""
    async def scenario():
        shell, kube, clock = with_job(progress_seconds=15)
        h = template_hash()
        w0, w1 = info("demo-worker-0", template=h, ip="10.0.0.1"), info("demo-worker-1", template=h, ip="10.0.0.2")
        shell.pods_index = {KEY: [w0, w1]}
        await reconciled(shell)
        kube.reports["10.0.0.1"] = {"step": 25, "totalSteps": 40, "stepSeconds": 2.0,
                                    "checkpoint": {"step": 22, "time": "2026-11-24T12:00:00Z", "path": "/c/step-00000022"}}
        await shell.trainers.poll(KEY)
        await clock.advance(60)
        await reconciled(shell)
        shell.pods_index = {KEY: [w0, dataclasses.replace(w1, phase="Failed", ready=False, exit_code=1, reason="Error")]}
        await reconciled(shell)
        return shell

    shell = run(scenario())
    goodput = shell.records["u1"].last_status.goodput
    assert (goodput.productive_seconds, goodput.lost_seconds, goodput.restarting_seconds) == (100.0, 12.0, 8.0)
    labels = 'job="demo",namespace="team-a"'
    assert scraped(shell, "disttrain_job_lost_seconds_total") == {
        f'disttrain_job_lost_seconds_total{{cause="ExitCode",{labels}}}': 12.0}
    assert scraped(shell, "disttrain_job_goodput_ratio") == {f"disttrain_job_goodput_ratio{{{labels}}}": 0.8333}


def test_a_node_event_queues_the_jobs_on_that_node_and_only_when_its_health_changed():
    from disttrain.operator.core.nodes import NodeHealth

    def health(ready: str) -> NodeHealth:
        return NodeHealth(name="bad", ready=ready, ready_since="2026-11-24T12:00:00Z", ready_reason="",
                          tainted_since=None, tainted="")

    shell = controller()
    a, b = ("team-a", "on-bad"), ("team-a", "elsewhere")
    shell.pods_index = {a: [dataclasses.replace(info("demo-worker-0"), node="bad")],
                        b: [dataclasses.replace(info("demo-worker-0"), node="good")]}
    shell.nodes_index = {"bad": [health("True")]}
    shell.node_event("bad")
    assert not shell.queue.pending(a)  # Ready, as it was: nothing to do
    shell.nodes_index = {"bad": [health("Unknown")]}
    shell.node_event("bad")
    assert shell.queue.pending(a) and not shell.queue.pending(b)
    shell.queue.discard(a)
    shell.node_event("bad")  # a heartbeat that changes nothing queues nothing more
    assert not shell.queue.pending(a)
    shell.nodes_index = {}
    shell.node_event("bad", deleted=True)  # gone: the jobs on it look again
    assert shell.queue.pending(a)

    # Ready, but a watched condition comes up (nodes.NodeRules): the jobs look again; an
    # unwatched condition changing does not queue them.
    shell.queue.discard(a)
    ready = dataclasses.replace(health("True"), conditions=(("MemoryPressure", "False", "", ""),),
                                allocatable=(("nvidia.com/gpu", "8"),))
    shell.nodes_index = {"bad": [ready]}
    shell.node_event("bad")
    assert not shell.queue.pending(a)
    shell.nodes_index = {"bad": [dataclasses.replace(ready, conditions=(("MemoryPressure", "True", "", ""),))]}
    shell.node_event("bad")
    assert not shell.queue.pending(a)
    shell.nodes_index = {"bad": [dataclasses.replace(ready, conditions=(("XidCriticalError", "True", "Xid79", ""),))]}
    shell.node_event("bad")
    assert shell.queue.pending(a)
    shell.queue.discard(a)
    shell.nodes_index = {"bad": [dataclasses.replace(ready, allocatable=(("nvidia.com/gpu", "7"),))]}
    shell.node_event("bad")  # a GPU fewer offered
    assert shell.queue.pending(a)


def test_workers_are_created_away_from_the_nodes_the_job_avoids():
    avoided = [{"node": "bad-node", "time": "2026-11-24T12:00:00Z", "failures": 2},
               {"node": "was-bad", "time": "2026-11-24T12:00:00Z", "failures": 2,
                "liftedTime": "2026-11-24T12:01:00Z", "message": "no room"}]

    async def scenario():
        shell, kube, _clock = with_job(body(status={"phase": "Restarting", "avoidedNodes": avoided}))
        await reconciled(shell)
        return kube

    kube = run(scenario())
    pods = [o for (kind, _ns, _name), o in kube.objects.items() if kind == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}]}]


# ---- checkpoint-then-evict: the shell asks once per stop, and acts on the answer -------


def _suspending(answer: tuple[dict | None, str | None]):
    """A running job with a report is suspended; the trainer answers POST /checkpoint."""
    async def scenario():
        shell, kube, clock = with_job(progress_seconds=15)
        h = template_hash()
        shell.pods_index = {KEY: [info("demo-worker-0", template=h, ip="10.0.0.1"),
                                  info("demo-worker-1", template=h, ip="10.0.0.2")]}
        kube.reports["10.0.0.1"] = {"step": 7, "totalSteps": 10}
        await reconciled(shell)
        await shell.trainers.poll(KEY)
        kube.checkpoint_answers["10.0.0.1"] = answer
        shell.job_event(KEY, body(generation=2, suspend=True), "MODIFIED")
        await reconciled(shell)  # asks, in the background, and the answer queues the job
        first = kube.verbs("checkpoint", "delete")
        await reconciled(shell)  # acts on the answer
        await reconciled(shell)  # a later pass asks no more
        return kube.verbs("checkpoint", "delete"), first, shell.records["u1"].last_status.eviction

    return run(scenario())


def test_a_suspend_asks_one_worker_for_a_checkpoint_with_its_token_and_deletes_once_it_holds():
    held = {"step": 8, "totalSteps": 10, "heldAtStep": 8, "checkpoint": {"step": 8, "time": "2026-11-24T12:00:09Z",
                                                                         "path": "/checkpoints/step-8"}}
    calls, first, ev = _suspending((held, None))
    # hold = evictGraceSeconds (60) + HOLD_MARGIN_SECONDS; the request waits up to the grace
    assert first == [("checkpoint", "10.0.0.1", "uid-demo-worker-0", "120", "60")]
    assert calls[1:] == [("delete", "Pod", "demo-worker-0"), ("delete", "Pod", "demo-worker-1")]
    # eviction.step: the step the trainer held at (8), not the 7 the operator saw when it asked
    assert (ev.handshake, ev.step, ev.resume_from_step, ev.steps_lost) == ("Checkpointed", 8, 8, 0)


def test_a_trainer_that_refuses_the_request_is_stopped_with_sigterm_at_once_and_the_status_says_why():
    calls, first, ev = _suspending((None, "HTTP 404 from POST /checkpoint"))
    assert [c[0] for c in calls] == ["checkpoint", "delete", "delete"]  # an answer: the next worker is not asked
    assert ev.handshake == "NotSupported" and "HTTP 404 from POST /checkpoint" in ev.message


def test_a_worker_that_does_not_answer_passes_the_request_to_the_next():
    calls, first, ev = _suspending((None, "POST /checkpoint failed: ClientConnectorError"))
    assert [c[:2] for c in first] == [("checkpoint", "10.0.0.1"), ("checkpoint", "10.0.0.2")]
    assert ev.handshake == "NotSupported" and "ClientConnectorError" in ev.message
