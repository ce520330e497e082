//! Checkpoints of the namespace: a kernel that dies or is killed comes back with the
//! namespace as of the last completed execution, and the agent is told which names came back
//! and which were lost.

use serde_json::{json, Value};

use crate::support::{self, Family, Server, ToolResult};

/// Defines what a session builds up: plain values, a function, a class and its instance, a
/// lambda, modules under aliases, and what cannot be kept (a generator, an open file); and a
/// 2 MiB buffer, so that a forked child writes the checkpoint (a small namespace is written by
/// the kernel itself).
const SETUP: &str = "\
import json as j
blob = bytearray(range(256)) * 8192
import os.path as osp
x = 41
data = {'a': [1, 2, (3, 'four')]}
def double(n):
    return 2 * n
class Point:
    def __init__(self, x):
        self.x = x
p = Point(5)
square = lambda n: n * n
gen = (n for n in range(3))
handle = open(osp.join(__import__('tempfile').gettempdir(), 'ipython-mcp-checkpoint-test.txt'), 'w')
";

const CHECK: &str = "print((x, data, double(4), p.x, Point(2).x, square(3), j.dumps([1]), osp.basename('/a/b'), len(blob), blob[-1], 'gen' in dir(), 'handle' in dir(), 'doomed' in dir()))";
const RESTORED: &str =
    "(41, {'a': [1, 2, (3, 'four')]}, 8, 5, 2, 9, '[1]', 'b', 2097152, 255, False, False, False)\n";

async fn run(server: &Server, code: &str) -> ToolResult {
    let result = server.call("execute", json!({ "code": code })).await;
    assert!(result.ok(), "{code}: {result:?}");
    result
}

fn names(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("names: {value}"))
        .iter()
        .map(|name| name.as_str().expect("a name").to_owned())
        .collect()
}

/// What a replacement reports: the names back (configured bindings and private names are not
/// the user's, so not listed), the lost ones with reasons, and the line the model reads.
fn assert_restored(runtime: &Value, text: &str) {
    assert_eq!(runtime["namespace"], "restored", "{runtime}");
    let restore = &runtime["restore"];
    assert_eq!(
        names(&restore["restored"]),
        ["Point", "blob", "data", "double", "j", "osp", "p", "square", "x"],
        "{restore}"
    );
    let lost: Vec<(String, String)> = restore["lost"]
        .as_array()
        .expect("lost")
        .iter()
        .map(|lost| {
            (
                lost["name"].as_str().expect("name").to_owned(),
                lost["reason"].as_str().expect("reason").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        lost.iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        ["gen", "handle"],
        "{restore}"
    );
    assert!(lost[0].1.contains("generator"), "{lost:?}");
    assert!(restore["restore_ms"].as_u64().is_some(), "{restore}");
    assert_eq!(
        restore["execution_count"], 1,
        "taken after SETUP: {restore}"
    );
    assert!(
        text.contains("namespace restored as of execution")
            && text.contains("9 back (Point, blob, data, double, j, osp, p, square, x)")
            && text.contains("lost: gen ("),
        "{text}"
    );
}

/// A cell that kills its kernel (`os._exit`) and a SIGKILL from outside while it is idle:
/// each time the replacement comes back with the last completed execution's namespace; what
/// the killing cell assigned is not there.
#[tokio::test]
async fn a_dead_kernel_comes_back_with_the_namespace_of_the_last_completed_execution() {
    let server = Server::start(Family::Handshake, &[]).await;
    run(&server, SETUP).await;
    // The status says what a replacement would get, once the child has written it.
    let status = server
        .wait_until(|status| status["checkpoint"]["taken"] == true)
        .await;
    let checkpoint = &status["checkpoint"];
    assert_eq!(checkpoint["execution_count"], 1, "{checkpoint}");
    assert_eq!(checkpoint["names"], 9, "{checkpoint}");
    assert_eq!(checkpoint["lost_names"], 2, "{checkpoint}");
    assert_eq!(checkpoint["lost"][0]["name"], "gen", "{checkpoint}");
    assert!(checkpoint["bytes"].as_u64() > Some(2 << 20), "{checkpoint}");
    assert!(checkpoint["failure"].is_null(), "{checkpoint}");
    let died = server
        .call(
            "execute",
            json!({"code": "doomed = 1\nimport os\nos._exit(3)"}),
        )
        .await;
    assert_eq!(died.structured["error"]["code"], "kernel_died", "{died:?}");
    assert!(
        died.structured["error"]["hint"]
            .as_str()
            .is_some_and(|hint| hint.contains("restored from its checkpoint")),
        "{died:?}"
    );
    assert_restored(&died.structured["runtime"], &died.text());
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(status["latest_namespace_outcome"], "restored", "{status}");
    assert_eq!(status["latest_restore"]["restored"][0], "Point", "{status}");
    let back = run(&server, CHECK).await;
    assert_eq!(back.structured["stdout"], RESTORED, "{back:?}");

    // Killed from outside between calls: the next call is told, and finds the namespace.
    run(&server, "x = 42").await;
    let pid = status["kernel"]["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill(2) on the pid of our own server's kernel.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    support::wait_until_gone(pid).await;
    server
        .wait_until(|status| status["epoch"] == 2 && status["state"] == "ready")
        .await;
    let next = run(&server, "x").await;
    assert_eq!(next.structured["result"]["text/plain"], "42", "{next:?}");
    assert_eq!(
        next.structured["runtime"]["namespace"], "restored",
        "{next:?}"
    );
    assert!(
        next.structured["notice"]
            .as_str()
            .is_some_and(|notice| notice.contains("restored from its checkpoint")),
        "{next:?}"
    );
    server.stop().await;
}

/// A kernel that dies between calls is replaced at once and its checkpoint loads into the
/// replacement meanwhile: the status says `recovering` until it is loaded, and a call admitted
/// meanwhile waits for it, then reports the restore with how long it took.
#[tokio::test]
async fn a_call_after_a_death_between_calls_waits_for_the_restore() {
    let server = Server::start(Family::Handshake, &[]).await;
    let flag = support::Flag::new();
    // A value whose loading waits for the flag: the restore holds until the test lets it go.
    let code = format!(
        "def _hold(path):\n    import os, time\n    deadline = time.monotonic() + 600\n    while not os.path.exists(path) and time.monotonic() < deadline:\n        time.sleep(0.02)\n    return 'held'\nclass Held:\n    def __reduce__(self):\n        return (_hold, ({:?},))\nheld = Held()\nx = 1",
        flag.path().display().to_string()
    );
    run(&server, &code).await;
    let status = server
        .wait_until(|status| status["checkpoint"]["taken"] == true)
        .await;
    let pid = status["kernel"]["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill(2) on the pid of our own server's kernel.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    // The replacement is up and loading: recovering, not ready.
    let loading = server
        .wait_until(|status| {
            status["epoch"] == 1
                && status["kernel"]["pid"]
                    .as_i64()
                    .is_some_and(|new| new != i64::from(pid))
        })
        .await;
    assert_eq!(loading["state"], "recovering", "{loading}");
    let queued = server
        .call(
            "execute",
            json!({"code": "(held, x + 1)", "background": true}),
        )
        .await;
    assert!(queued.ok(), "{queued:?}");
    let id = queued.structured["execution_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let still = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(still["state"], "recovering", "{still}");
    flag.set();
    let done = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 120}),
        )
        .await;
    assert_eq!(
        done.structured["result"]["text/plain"], "('held', 2)",
        "{done:?}"
    );
    let runtime = &done.structured["runtime"];
    assert_eq!(runtime["namespace"], "restored", "{done:?}");
    assert_eq!(
        names(&runtime["restore"]["restored"]),
        ["Held", "held", "x"],
        "{done:?}"
    );
    assert!(
        runtime["restore"]["restore_ms"].as_u64().is_some(),
        "{done:?}"
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(status["state"], "ready", "{status}");
    server.stop().await;
}

/// Code that ignores SIGINT, killed past its deadline: the replacement is restored too.
#[tokio::test]
async fn a_kernel_killed_past_its_deadline_comes_back_restored() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "1")],
    )
    .await;
    run(&server, SETUP).await;
    let killed = server
        .call(
            "execute",
            json!({"code": "doomed = 1\nimport signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)", "timeout_seconds": 2}),
        )
        .await;
    assert_eq!(killed.structured["status"], "timeout", "{killed:?}");
    assert_eq!(killed.structured["runtime"]["interruption"], "terminated");
    assert_restored(&killed.structured["runtime"], &killed.text());
    let back = run(&server, CHECK).await;
    assert_eq!(back.structured["stdout"], RESTORED, "{back:?}");
    server.stop().await;
}

/// With checkpoints off, and after `kernel_restart`, a replacement starts empty; a restart
/// asked to restore does.
#[tokio::test]
async fn checkpoints_off_and_a_plain_restart_reset_and_a_restoring_restart_restores() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_CHECKPOINT", "off")]).await;
    run(&server, "x = 1").await;
    let died = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    assert_eq!(died.structured["runtime"]["namespace"], "reset", "{died:?}");
    assert!(died.structured["runtime"].get("restore").is_none());
    let gone = run(&server, "'x' in dir()").await;
    assert_eq!(gone.structured["result"]["text/plain"], "False");
    server.stop().await;

    let server = Server::start(Family::Handshake, &[]).await;
    run(&server, "x = 1").await;
    let restarted = server.call("kernel_restart", json!({})).await;
    assert_eq!(
        restarted.structured["latest_namespace_outcome"], "reset",
        "{restarted:?}"
    );
    // Its kernel dies before a checkpoint of its own: what the restart dropped stays dropped.
    let died = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    assert_eq!(died.structured["runtime"]["namespace"], "reset", "{died:?}");
    let gone = run(&server, "'x' in dir()").await;
    assert_eq!(gone.structured["result"]["text/plain"], "False");

    // Asked for, a restart restores; what came back is in the status it answers with.
    run(&server, "y = 2").await;
    let restarted = server
        .call("kernel_restart", json!({"restore": true}))
        .await;
    assert!(restarted.ok(), "{restarted:?}");
    assert_eq!(
        restarted.structured["latest_namespace_outcome"], "restored",
        "{restarted:?}"
    );
    assert_eq!(
        names(&restarted.structured["latest_restore"]["restored"]),
        ["y"],
        "{restarted:?}"
    );
    let back = run(&server, "y").await;
    assert_eq!(back.structured["result"]["text/plain"], "2");
    server.stop().await;
}

/// Killed by its memory limit (the watchdog, which every machine has): restored as after any
/// death.
#[tokio::test]
async fn a_kernel_killed_by_its_memory_limit_comes_back_restored() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_KERNEL_MEMORY_LIMIT", "300MiB"),
            ("IPYTHON_MCP_KERNEL_MEMORY_ENFORCEMENT", "watchdog"),
        ],
    )
    .await;
    run(&server, SETUP).await;
    let grown = server
        .call(
            "execute",
            json!({"code": "doomed = []\nwhile True:\n    doomed.append(b'x' * (8 * 2**20))"}),
        )
        .await;
    assert_eq!(
        grown.structured["error"]["code"], "out_of_memory",
        "{grown:?}"
    );
    assert_restored(&grown.structured["runtime"], &grown.text());
    let back = run(&server, CHECK).await;
    assert_eq!(back.structured["stdout"], RESTORED, "{back:?}");
    server.stop().await;
}

/// A value past the session's bound is not kept and is named; the rest come back.
#[tokio::test]
async fn a_value_past_the_bound_is_lost_and_named_while_the_rest_return() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_CHECKPOINT_MAX_BYTES", "100000")],
    )
    .await;
    run(&server, "big = bytearray(1_000_000)\nsmall = 'kept'").await;
    let died = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    let restore = &died.structured["runtime"]["restore"];
    assert_eq!(names(&restore["restored"]), ["small"], "{died:?}");
    assert_eq!(restore["lost"][0]["name"], "big", "{restore}");
    assert!(
        restore["lost"][0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("past the checkpoint bound")),
        "{restore}"
    );
    let back = run(&server, "(small, 'big' in dir())").await;
    assert_eq!(back.structured["result"]["text/plain"], "('kept', False)");
    server.stop().await;
}

/// A name removed with `remove` (no cell runs after it) does not come back with a replacement,
/// and the execution count is that of the last cell.
#[tokio::test]
async fn a_removed_name_stays_removed_after_a_restore() {
    let server = Server::start(Family::Handshake, &[]).await;
    run(&server, "a = 1\nb = 2").await;
    let removed = server.call("remove", json!({"names": ["a"]})).await;
    assert!(removed.ok(), "{removed:?}");
    let died = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    let restore = &died.structured["runtime"]["restore"];
    assert_eq!(names(&restore["restored"]), ["b"], "{died:?}");
    assert_eq!(restore["execution_count"], 1, "{restore}");
    server.stop().await;
}

/// A kernel using over half its memory limit takes checkpoints through a forked writer without
/// being killed: the writer's pages shared with the kernel are metered once.
#[tokio::test]
async fn a_checkpoint_writer_does_not_count_twice_against_the_memory_limit() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_KERNEL_MEMORY_LIMIT", "400MiB"),
            ("IPYTHON_MCP_KERNEL_MEMORY_ENFORCEMENT", "watchdog"),
        ],
    )
    .await;
    run(&server, "big = bytes(range(256)) * (250 * 4096)").await;
    // The next cell forks a second writer while the first may still work: the kernel is still
    // the first one after both.
    run(&server, "pass").await;
    let status = server
        .wait_until(|status| status["checkpoint"]["taken"] == true)
        .await;
    assert_eq!(status["epoch"], 0, "{status}");
    assert_eq!(status["checkpoint"]["names"], 1, "{status}");
    server.stop().await;
}

/// A 200 MB numpy array comes back whole and writable after the kernel dies (its memory is
/// written as it is, out of band, by the forked writer).
#[tokio::test]
async fn a_200_mb_numpy_array_comes_back() {
    let (_, deps) = support::python_with("numpy==2.2.6", "numpy", "numpy-deps").await;
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_LIBRARY_PATHS", &deps.display().to_string())],
    )
    .await;
    run(
        &server,
        "import numpy as np\narr = np.arange(25_000_000, dtype=np.float64)",
    )
    .await;
    let status = server
        .wait_until(|status| status["checkpoint"]["execution_count"] == 1)
        .await;
    assert!(
        status["checkpoint"]["bytes"].as_u64() > Some(200_000_000),
        "{status}"
    );
    let died = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    let runtime = &died.structured["runtime"];
    assert_eq!(runtime["namespace"], "restored", "{died:?}");
    assert_eq!(
        names(&runtime["restore"]["restored"]),
        ["arr", "np"],
        "{died:?}"
    );
    let back = run(
        &server,
        "arr[0] = -1\n(arr.shape, arr.dtype.name, float(arr[-1]), float(arr[0]), float(arr[1:].sum()))",
    )
    .await;
    assert_eq!(
        back.structured["result"]["text/plain"],
        "((25000000,), 'float64', 24999999.0, -1.0, 312499987500000.0)",
        "{back:?}"
    );
    server.stop().await;
}

/// No cell waits for a checkpoint: while the writer of one cell is held (a value whose
/// pickling waits for a flag the test sets), the next cells complete; a kill then waits for
/// that writer and for the newest waiting snapshot, and the replacement gets the last cell's
/// namespace.
#[tokio::test]
async fn a_cell_does_not_wait_for_the_writer_and_a_kill_waits_for_the_newest_checkpoint() {
    let server = Server::start(Family::Handshake, &[]).await;
    let flag = support::Flag::new();
    // `big` first: the kernel's own small attempt gives up on it before it pickles `held`, so
    // only the forked writer waits for the flag.
    let code = format!(
        "big = bytearray(2 << 20)\ndef _hold(path):\n    import os, time\n    deadline = time.monotonic() + 600\n    while not os.path.exists(path) and time.monotonic() < deadline:\n        time.sleep(0.02)\n    return 7\nclass Held:\n    def __reduce__(self):\n        return (int, (_hold({:?}),))\nheld = Held()",
        flag.path().display().to_string()
    );
    run(&server, &code).await;
    for x in [2, 3] {
        let next = server
            .call(
                "execute",
                json!({"code": format!("x = {x}"), "timeout_seconds": 60}),
            )
            .await;
        assert_eq!(next.structured["status"], "ok", "{next:?}");
    }
    // The writer of the first cell is still held: nothing is written yet.
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(status["checkpoint"]["taken"], false, "{status}");
    let pid = status["kernel"]["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill(2) on the pid of our own server's kernel.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let loading = server
        .wait_until(|status| {
            status["epoch"] == 1
                && status["kernel"]["pid"]
                    .as_i64()
                    .is_some_and(|new| new != i64::from(pid))
        })
        .await;
    assert_eq!(loading["state"], "recovering", "{loading}");
    flag.set();
    let back = run(&server, "(x, held, len(big))").await;
    assert_eq!(
        back.structured["result"]["text/plain"], "(3, 7, 2097152)",
        "{back:?}"
    );
    assert_eq!(
        back.structured["runtime"]["namespace"], "restored",
        "{back:?}"
    );
    assert_eq!(
        back.structured["runtime"]["restore"]["execution_count"], 3,
        "{back:?}"
    );
    server.stop().await;
}

/// The checkpoint after cell `count`, once written (`runtime_status.checkpoint`).
async fn checkpoint_after(server: &Server, count: u64) -> Value {
    let status = server
        .wait_until(|status| status["checkpoint"]["execution_count"] == count)
        .await;
    status["checkpoint"].clone()
}

/// A 64 MB numpy array changed in place, through `np.add(…, out=)`, a view, a thread and
/// `ctypes.memmove` (C code writing its memory), a cell each: every change comes back after
/// the kernel is killed. A cell that leaves the array as it is writes almost nothing, and one
/// that changes a few of its bytes about one chunk.
#[tokio::test]
async fn a_numpy_array_changed_in_place_comes_back_changed_and_unchanged_is_not_rewritten() {
    let (_, deps) = support::python_with("numpy==2.2.6", "numpy", "numpy-deps").await;
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_LIBRARY_PATHS", &deps.display().to_string())],
    )
    .await;
    // Distinct values: equal chunks are stored once (zeros would write one chunk).
    run(&server, "import numpy as np\na = np.arange(8_000_000.0)").await;
    let first = checkpoint_after(&server, 1).await;
    assert!(
        first["bytes_written"].as_u64() > Some(64_000_000),
        "{first}"
    );
    assert_eq!(first["tracking"], "hash", "{first}");

    run(&server, "x = 1").await;
    let trivial = checkpoint_after(&server, 2).await;
    assert!(
        trivial["bytes_written"].as_u64() < Some(1 << 20),
        "an unchanged array is not written again: {trivial}"
    );
    assert!(trivial["values_reused"].as_u64() >= Some(1), "{trivial}");

    run(&server, "np.add(a, 1, out=a)").await;
    let whole = checkpoint_after(&server, 3).await;
    assert!(
        whole["bytes_written"].as_u64() > Some(64_000_000),
        "{whole}"
    );
    let few_bytes = [
        "view = a[2_000_000:2_000_010]\nview[:] = 7\ndel view",
        "import threading\nwriter = threading.Thread(target=a.__setitem__, args=(slice(5_000_000, 5_000_010), 9))\nwriter.start()\nwriter.join()\ndel writer",
        "import ctypes\nctypes.memmove(a.ctypes.data + 8 * 6_000_000, (ctypes.c_double * 1)(3.5), 8)",
    ];
    for (count, code) in (4..).zip(few_bytes) {
        run(&server, code).await;
        let changed = checkpoint_after(&server, count).await;
        assert!(
            changed["bytes_written"].as_u64() < Some(9 << 20),
            "a few bytes changed write about one chunk: {code}: {changed}"
        );
    }

    let status = server.call("runtime_status", json!({})).await.structured;
    let pid = status["kernel"]["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill(2) on the pid of our own server's kernel.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    support::wait_until_gone(pid).await;
    // The server sees the death when it reaps the kernel (in namespaces, when the launcher
    // ends): a call sent before then would find it dead.
    server
        .wait_until(|status| status["epoch"] == 1 && status["state"] == "ready")
        .await;
    let back = run(
        &server,
        "expected = np.arange(8_000_000.0) + 1\nexpected[2_000_000:2_000_010] = 7\nexpected[5_000_000:5_000_010] = 9\nexpected[6_000_000] = 3.5\n(float(a[0]), float(a[2_000_000]), float(a[5_000_000]), float(a[6_000_000]), bool((a == expected).all()))",
    )
    .await;
    assert_eq!(
        back.structured["runtime"]["namespace"], "restored",
        "{back:?}"
    );
    assert_eq!(
        back.structured["result"]["text/plain"], "(1.0, 7.0, 9.0, 3.5, True)",
        "{back:?}"
    );
    server.stop().await;
}
