//! End to end: the kernels toolset and long-running work through the real binary —
//! background executions, get_output and its spool paging, callers that stop waiting, several
//! kernels, kernelspec and venv discovery, a non-Python kernel, max_kernels and idle reaping.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::{json, Value};
use support::{Family, Server, ToolResult};

/// Polls get_output until the execution has finished.
async fn finished_output(server: &Server, execution_id: &str) -> ToolResult {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let output = server
            .call(
                "get_output",
                json!({"execution_id": execution_id, "wait_seconds": 30}),
            )
            .await;
        if output.structured["finished"] == true {
            return output;
        }
        assert!(Instant::now() < deadline, "never finished: {output:?}");
    }
}

#[tokio::test]
async fn background_output_is_polled_to_completion_and_paged_from_the_spool() {
    let server = Server::start(Family::Handshake, &[]).await;
    // About 53 MB of stdout: far more than execute returns, all of it kept on disk.
    let code = "import sys\nfor i in range(1_000_000):\n    print(f'line {i:07d} ' + 'x' * 40)\nprint('done', file=sys.stderr)";
    let pending = server
        .call("execute", json!({"code": code, "background": true}))
        .await;
    assert!(pending.ok(), "{pending:?}");
    // `pending`, not a finished result: the call returned while the cell was still running.
    assert_eq!(pending.structured["status"], "pending");
    assert!(pending.text().contains("get_output"), "{}", pending.text());
    let id = pending.structured["execution_id"]
        .as_str()
        .expect("execution_id")
        .to_owned();

    let finished = finished_output(&server, &id).await;
    let done = &finished.structured;
    assert_eq!(done["status"], "ok", "{done}");
    assert_eq!(done["execution_id"], id.as_str());
    let line_bytes = "line 0000000 ".len() as u64 + 40 + 1;
    // Whole lines are kept from the beginning and the end, with one marker line between, and
    // all of it within the 8192 characters of max_text_chars.
    let support::CutStream {
        head,
        marker,
        tail,
        view,
    } = finished.cut("stdout");
    assert!(view.chars().count() <= 8192, "{}", view.len());
    let (head_lines, tail_lines) = (head.lines().count() as u64, tail.lines().count() as u64);
    assert_eq!(head.len() as u64, head_lines * line_bytes, "{head}");
    assert_eq!(tail.len() as u64, tail_lines * line_bytes, "{tail}");
    assert!(
        head_lines > 20 && tail_lines > 100,
        "{head_lines}/{tail_lines}"
    );
    assert_eq!(
        done["stdout_omitted_chars"],
        (1_000_000 - head_lines - tail_lines) * line_bytes
    );
    assert!(
        tail.ends_with(&format!("line 0999999 {}\n", "x".repeat(40))),
        "{view}"
    );
    let first_omitted = head_lines + 1;
    assert_eq!(
        marker,
        format!(
            "[… {} characters ({} lines) omitted; get_output(execution_id=\"{id}\", stream=\"stdout\", start_line={first_omitted}) pages them …]",
            (1_000_000 - head_lines - tail_lines) * line_bytes,
            1_000_000 - head_lines - tail_lines
        )
    );
    assert_eq!(
        done["spool"]["stdout_bytes"],
        1_000_000 * line_bytes,
        "{done}"
    );
    assert_eq!(done["spool"]["stderr_bytes"], 5);
    assert_eq!(done["spool"]["dropped_bytes"], 0);
    // The marker's pointer pages the middle from its first line.
    let middle = server
        .call(
            "get_output",
            json!({"execution_id": id, "stream": "stdout", "start_line": first_omitted, "max_lines": 1}),
        )
        .await;
    assert_eq!(
        middle.structured["page"]["lines"][0]["text"],
        format!("line {:07} {}", first_omitted - 1, "x".repeat(40))
    );

    // A page from the middle, by line number.
    let page = server
        .call(
            "get_output",
            json!({"execution_id": id, "stream": "stdout", "start_line": 500_000, "max_lines": 3}),
        )
        .await;
    let page = &page.structured["page"];
    assert_eq!(page["total_lines"], 1_000_000);
    assert_eq!(page["lines"][0]["line"], 500_000);
    assert_eq!(
        page["lines"][0]["text"],
        format!("line 0499999 {}", "x".repeat(40))
    );
    assert_eq!(page["lines"].as_array().expect("lines").len(), 3);
    assert_eq!(page["next_line"], 500_003);
    assert_eq!(page["complete"], true);

    // The last lines, counted from the end.
    let tail = server
        .call("get_output", json!({"execution_id": id, "start_line": -2}))
        .await;
    let numbers: Vec<u64> = tail.structured["page"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|line| line["line"].as_u64().expect("number"))
        .collect();
    assert_eq!(numbers, vec![999_999, 1_000_000]);

    // A regex over the whole stream.
    let matches = server
        .call(
            "get_output",
            json!({"execution_id": id, "pattern": "^line 0(012345|999999) "}),
        )
        .await;
    let page = &matches.structured["page"];
    assert_eq!(page["total_matches"], 2, "{page}");
    assert_eq!(page["lines"][0]["line"], 12_346);
    assert_eq!(page["lines"][1]["line"], 1_000_000);
    assert!(matches.text().contains("1000000:"), "{}", matches.text());

    let stderr = server
        .call(
            "get_output",
            json!({"execution_id": id, "stream": "stderr"}),
        )
        .await;
    assert_eq!(stderr.structured["page"]["lines"][0]["text"], "done");

    // Bad requests change nothing and say why.
    for (arguments, needle) in [
        (
            json!({"execution_id": id, "pattern": "("}),
            "regular expression",
        ),
        (json!({"execution_id": id, "start_line": 0}), "1-based"),
        (json!({"execution_id": id, "max_lines": 5}), "max_lines"),
        (
            json!({"execution_id": id, "wait_seconds": -1}),
            "wait_seconds",
        ),
        (json!({"execution_id": "no-such-id"}), "no execution"),
    ] {
        let refused = server.call("get_output", arguments.clone()).await;
        assert!(refused.is_error, "{arguments}");
        let message = refused.structured["error"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(message.contains(needle), "{arguments}: {message}");
    }

    // A foreground execute with long output says where the rest is.
    let long = server
        .call("execute", json!({"code": "print('y' * 100_000)"}))
        .await;
    assert_eq!(long.structured["spool"]["stdout_bytes"], 100_001);
    assert!(long.text().contains("full output kept"), "{}", long.text());
    server.stop().await;
}

/// The spool's durability: an answered execution's output is in its spool files when the
/// answer arrives (the kernel's helper writes what it batched before the kernel replies), so
/// a SIGKILL right after the answer, which takes the kernel down too, loses none of it.
#[tokio::test]
async fn a_server_killed_after_an_answer_leaves_all_of_its_output_in_the_spool() {
    let tmp = tempfile::tempdir().expect("tmp");
    let [(tmp_var, tmp_dir), (run_var, run_dir)] = support::temp_and_private(tmp.path());
    let server = Server::start(
        Family::Handshake,
        &[(tmp_var, &tmp_dir), (run_var, &run_dir)],
    )
    .await;
    let list = server.call("kernel_list", json!({})).await;
    let kernel_pid = list.structured["kernels"][0]["pid"]
        .as_i64()
        .expect("kernel pid") as i32;
    // Many small writes, as a loop of prints makes them: they are batched in the kernel.
    let code = "for i in range(100_000):\n    print(f'{i:06d}', 'x' * 40)";
    let run = server.call("execute", json!({"code": code})).await;
    assert!(run.ok(), "{run:?}");
    let expected: String = (0..100_000)
        .map(|i| format!("{i:06} {}\n", "x".repeat(40)))
        .collect();
    assert_eq!(run.structured["spool"]["stdout_bytes"], expected.len());

    // SAFETY: kill(2) on the pid of our own child process.
    unsafe {
        libc::kill(server.pid as i32, libc::SIGKILL);
    }
    support::wait_until_gone(server.pid as i32).await;
    support::wait_until_gone(kernel_pid).await;
    drop(server);
    let mut spooled = Vec::new();
    for dir in support::spool_dirs(tmp.path()) {
        for file in std::fs::read_dir(dir).expect("spool").flatten() {
            if file.file_name().to_string_lossy().ends_with(".stdout") {
                spooled.push(std::fs::read(file.path()).expect("read"));
            }
        }
    }
    assert_eq!(spooled.len(), 1, "one execution printed");
    assert!(
        spooled[0] == expected.as_bytes(),
        "the spool holds {} of the {} bytes answered",
        spooled[0].len(),
        expected.len()
    );
}

/// Python that blocks the cell until `flag` exists: the test decides when the cell may end,
/// so nothing depends on how fast a loaded machine runs it. Gives up after five minutes, so a
/// test that failed before releasing it leaves no cell running for long.
fn wait_for_flag(flag: &Path) -> String {
    format!(
        "import os as _os, time as _time\n_deadline = _time.monotonic() + 300\nwhile not _os.path.exists({flag:?}):\n    if _time.monotonic() > _deadline:\n        raise TimeoutError('the test never released this cell')\n    _time.sleep(0.05)\n"
    )
}

/// Polls get_output (latest execution of `kernel`) until its stdout so far contains `needle`,
/// and returns that answer.
async fn live_output_containing(server: &Server, kernel: &str, needle: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let output = server.call("get_output", json!({"kernel": kernel})).await;
        if output.structured["stdout"]
            .as_str()
            .is_some_and(|stdout| stdout.contains(needle))
        {
            return output.structured;
        }
        assert!(
            Instant::now() < deadline,
            "{needle:?} never arrived: {output:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_caller_that_stops_waiting_can_come_back_for_the_output() {
    let server = Server::start(Family::Handshake, &[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let release = dir.path().join("release");
    // Ticks, then waits for the test: the execution is certainly still running when the test
    // comes back for it.
    let code = format!(
        "import time\nfor i in range(8):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\n{}",
        wait_for_flag(&release)
    );
    // The caller stops waiting once output has arrived, without cancelling (a dropped
    // connection, a client with its own timeout): the execution keeps running and is collected.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("execute")
            .with_arguments(json!({"code": code}).as_object().expect("object").clone()),
    ));
    let handle = server
        .client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .expect("request sent");
    live_output_containing(&server, "default", "tick 0").await;
    drop(handle);

    // Without its id: the latest execution of the kernel, still running.
    let running = server.call("get_output", json!({})).await;
    assert_eq!(running.structured["status"], "pending", "{running:?}");
    assert_eq!(running.structured["finished"], false);
    assert!(
        running.structured["stdout"]
            .as_str()
            .unwrap_or("")
            .starts_with("tick 0\n"),
        "what has arrived so far: {running:?}"
    );
    let id = running.structured["execution_id"]
        .as_str()
        .expect("id")
        .to_owned();
    std::fs::write(&release, "").expect("release the cell");
    let done = finished_output(&server, &id).await.structured;
    assert_eq!(done["status"], "ok", "{done}");
    let expected: String = (0..8).map(|i| format!("tick {i}\n")).collect();
    assert_eq!(done["stdout"], expected);
    // kernel_list knows it too.
    let list = server.call("kernel_list", json!({})).await;
    assert_eq!(list.structured["kernels"][0]["executions"][0], id.as_str());
    server.stop().await;
}

#[tokio::test]
async fn kernels_are_isolated_limited_and_stopped() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_MAX_KERNELS", "3")]).await;
    let status = server.call("runtime_status", json!({})).await;
    let python = status.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();

    let started = server
        .call("kernel_start", json!({"spec": python, "kernel": "work"}))
        .await;
    assert!(started.ok(), "{started:?}");
    assert_eq!(started.structured["kernel"], "work");
    assert_eq!(started.structured["status"]["state"], "ready");
    let second = server.call("kernel_start", json!({"spec": python})).await;
    assert!(second.ok(), "{second:?}");
    let generated = second.structured["kernel"].as_str().expect("id").to_owned();
    assert!(generated.starts_with('k'), "{generated}");

    // Isolated namespaces, separate processes.
    server
        .call("execute", json!({"code": "x = 'default'"}))
        .await;
    server
        .call("execute", json!({"code": "x = 'work'", "kernel": "work"}))
        .await;
    let here = server.call("execute", json!({"code": "x"})).await;
    assert_eq!(here.structured["result"]["text/plain"], "'default'");
    let there = server
        .call("execute", json!({"code": "x", "kernel": "work"}))
        .await;
    assert_eq!(there.structured["result"]["text/plain"], "'work'");
    let fresh = server
        .call("execute", json!({"code": "x", "kernel": generated}))
        .await;
    assert_eq!(fresh.structured["error"]["ename"], "NameError");
    let list = server.call("kernel_list", json!({})).await;
    let kernels = list.structured["kernels"]
        .as_array()
        .expect("kernels")
        .clone();
    let names: Vec<&str> = kernels
        .iter()
        .filter_map(|k| k["kernel"].as_str())
        .collect();
    assert_eq!(names, vec!["default", generated.as_str(), "work"]);
    let pids: Vec<Value> = kernels.iter().map(|kernel| kernel["pid"].clone()).collect();
    assert!(pids[0] != pids[1] && pids[1] != pids[2] && pids[0] != pids[2]);

    // max_kernels, and refusals that change nothing.
    let refused = server.call("kernel_start", json!({"spec": python})).await;
    assert_eq!(refused.structured["error"]["code"], "limit_exceeded");
    for (arguments, needle) in [
        (json!({"spec": python, "kernel": "work"}), "already running"),
        (json!({"spec": python, "kernel": "bad id!"}), "kernel id"),
        (json!({"spec": "no-such-kernelspec"}), "no kernelspec"),
        (json!({"spec": "venv:/no/such/dir"}), "no virtualenv"),
        (json!({"spec": "relative/python"}), "absolute path"),
    ] {
        let refused = server.call("kernel_start", arguments.clone()).await;
        assert!(refused.is_error, "{arguments}");
        let message = refused.structured["error"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(message.contains(needle), "{arguments}: {message}");
    }
    let default_stop = server
        .call("kernel_stop", json!({"kernel": "default"}))
        .await;
    assert!(default_stop.is_error);

    // Stop one: its process goes, and the name is free again.
    let pid = pids[1].as_i64().expect("pid") as i32;
    let stopped = server
        .call("kernel_stop", json!({"kernel": generated}))
        .await;
    assert!(stopped.ok(), "{stopped:?}");
    assert_eq!(stopped.structured["state"], "closed");
    support::wait_until_gone(pid).await;
    let gone = server
        .call("execute", json!({"code": "1", "kernel": generated}))
        .await;
    assert_eq!(gone.structured["error"]["code"], "invalid_arguments");

    server.stop().await;
}

/// The ids of the running kernel sessions, sorted.
async fn session_names(server: &Server) -> Vec<String> {
    let list = server.call("kernel_list", json!({})).await;
    list.structured["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .filter_map(|kernel| kernel["kernel"].as_str().map(str::to_owned))
        .collect()
}

/// Polls kernel_list until the sessions are exactly `expected`.
async fn wait_for_sessions(server: &Server, expected: &[&str], why: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names = session_names(server).await;
        if names == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{why}: sessions are {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn idle_started_kernels_are_reaped_but_not_while_working() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS", "3")],
    )
    .await;
    let status = server.call("runtime_status", json!({})).await;
    let python = status.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();
    let started = server
        .call("kernel_start", json!({"spec": python, "kernel": "work"}))
        .await;
    assert!(started.ok(), "{started:?}");
    // A background job keeps its session alive past the idle timeout; once it is done and
    // nobody uses the session, the reaper stops it. The default session is never reaped.
    let dir = tempfile::tempdir().expect("tempdir");
    let release = dir.path().join("release");
    let code = format!("{}'slept'", wait_for_flag(&release));
    let job = server
        .call(
            "execute",
            json!({"code": code, "kernel": "work", "background": true}),
        )
        .await;
    assert!(job.ok(), "{job:?}");
    let job_id = job.structured["execution_id"]
        .as_str()
        .expect("id")
        .to_owned();
    // `idle`, started after the job was sent, is last used after `work`: when the reaper stops
    // it, `work` has gone unused for at least as long and would have been stopped in the same
    // pass, were it idle.
    let idle = server
        .call("kernel_start", json!({"spec": python, "kernel": "idle"}))
        .await;
    assert!(idle.ok(), "{idle:?}");
    wait_for_sessions(
        &server,
        &["default", "work"],
        "the idle session was never reaped",
    )
    .await;
    let job_state = server
        .call("get_output", json!({"execution_id": job_id}))
        .await;
    assert_eq!(
        job_state.structured["finished"], false,
        "the job still runs while its session is kept: {job_state:?}"
    );

    std::fs::write(&release, "").expect("release the job");
    let done = finished_output(&server, &job_id).await.structured;
    assert_eq!(done["result"]["text/plain"], "'slept'");
    wait_for_sessions(
        &server,
        &["default"],
        "the finished session was never reaped",
    )
    .await;
    server.stop().await;
}

/// A real venv with ipykernel and bash_kernel, made once per target dir with the product's own
/// provisioned Python.
fn project_with_venv(python: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernels-test-tree");
    let project = root.join("project");
    let venv = project.join(".venv");
    let ready = venv.join(".ipython-mcp-test-ready");
    if ready.exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&project).expect("project dir");
    std::fs::create_dir_all(root.join("not-a-project")).expect("other dir");
    let status = std::process::Command::new(python)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("run venv");
    assert!(status.success(), "python -m venv failed");
    let status = std::process::Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "-q",
            "ipykernel",
            "bash_kernel",
        ])
        .status()
        .expect("run pip");
    assert!(status.success(), "pip install ipykernel bash_kernel failed");
    std::fs::write(&ready, "").expect("marker");
    root
}

#[tokio::test]
async fn discovery_finds_a_real_venv_and_a_bash_kernelspec() {
    let python = support::provisioned_python().await;
    let root = tokio::task::spawn_blocking(move || project_with_venv(&python))
        .await
        .expect("venv");
    let project = root.join("project");
    let venv_python = project.join(".venv/bin/python");
    // A kernelspec for bash, in a private JUPYTER_PATH.
    let jupyter = root.join("jupyter");
    let spec_dir = jupyter.join("kernels/bash");
    std::fs::create_dir_all(&spec_dir).expect("spec dir");
    std::fs::write(
        spec_dir.join("kernel.json"),
        json!({
            "argv": [venv_python, "-m", "bash_kernel", "-f", "{connection_file}"],
            "display_name": "Bash",
            "language": "bash",
        })
        .to_string(),
    )
    .expect("kernel.json");

    let jupyter_path = jupyter.display().to_string();
    let server = Server::start(
        Family::Modern,
        &[
            ("JUPYTER_PATH", &jupyter_path),
            ("JUPYTER_DATA_DIR", &jupyter_path),
            // A cooperative stop ends as soon as the kernel answers, so a long grace costs
            // nothing and a slow machine cannot turn it into a kill.
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60"),
        ],
    )
    .await;
    let found = server
        .call(
            "kernel_discover",
            json!({"directory": root.display().to_string()}),
        )
        .await;
    assert!(found.ok(), "{found:?}");
    let venv_name = format!("venv:{}", project.display());
    assert_eq!(
        found.structured["venvs"].as_array().expect("venvs").len(),
        1
    );
    assert_eq!(found.structured["venvs"][0]["name"], venv_name.as_str());
    let bash = found.structured["kernelspecs"]
        .as_array()
        .expect("specs")
        .iter()
        .find(|spec| spec["name"] == "bash")
        .cloned()
        .expect("bash kernelspec listed");
    assert_eq!(bash["language"], "bash");
    assert_eq!(bash["helper_tools"], false);
    let refused = server
        .call("kernel_discover", json!({"directory": "relative"}))
        .await;
    assert!(refused.is_error);

    // The venv kernel runs the project's own Python.
    let started = server
        .call(
            "kernel_start",
            json!({"spec": venv_name, "kernel": "project"}),
        )
        .await;
    assert!(started.ok(), "{started:?}");
    assert_eq!(
        started.structured["status"]["kernel"]["python"],
        venv_python.display().to_string()
    );
    let prefix = server
        .call(
            "execute",
            json!({"code": "import sys; sys.prefix", "kernel": "project"}),
        )
        .await;
    assert_eq!(
        prefix.structured["result"]["text/plain"],
        format!("'{}'", project.join(".venv").display())
    );

    // A bash kernel: execute, get_output and interrupt work; helper tools say why not.
    let started = server
        .call("kernel_start", json!({"spec": "bash", "kernel": "sh"}))
        .await;
    assert!(started.ok(), "{started:?}");
    assert_eq!(started.structured["status"]["kernel"]["language"], "bash");
    assert_eq!(started.structured["status"]["kernel"]["helper"], false);
    let echoed = server
        .call(
            "execute",
            json!({"code": "for i in 1 2 3; do echo \"n=$i\"; done", "kernel": "sh"}),
        )
        .await;
    assert!(echoed.ok(), "{echoed:?}");
    assert_eq!(echoed.structured["stdout"], "n=1\nn=2\nn=3\n");
    let id = echoed.structured["execution_id"].as_str().expect("id");
    let page = server
        .call("get_output", json!({"execution_id": id, "pattern": "n=2"}))
        .await;
    assert_eq!(page.structured["page"]["lines"][0]["line"], 2, "{page:?}");
    let sleeping = server
        .call(
            "execute",
            json!({"code": "echo armed; sleep 600", "kernel": "sh", "background": true}),
        )
        .await;
    assert!(sleeping.ok(), "{sleeping:?}");
    live_output_containing(&server, "sh", "armed").await;
    let stopped = server.call("interrupt", json!({"kernel": "sh"})).await;
    assert_eq!(stopped.structured["interrupted"], true, "{stopped:?}");
    assert_eq!(stopped.structured["interruption"], "cooperative");
    assert_eq!(stopped.structured["namespace"], "preserved");
    let sleeping_id = sleeping.structured["execution_id"].as_str().expect("id");
    assert_eq!(
        finished_output(&server, sleeping_id).await.structured["finished"],
        true
    );
    let after = server
        .call("execute", json!({"code": "echo after", "kernel": "sh"}))
        .await;
    assert_eq!(after.structured["stdout"], "after\n", "{after:?}");
    for tool in ["list", "reset"] {
        let refused = server.call(tool, json!({"kernel": "sh"})).await;
        assert_eq!(
            refused.structured["error"]["code"], "unsupported_kernel",
            "{tool}: {refused:?}"
        );
    }
    server.stop().await;
}

/// Python (standard library only: no Pillow anywhere) defining `noise_png(width, height)`, a
/// valid PNG of random pixels, which no encoder can shrink much.
const NOISE_PNG: &str = "import os, struct, zlib\ndef noise_png(width, height):\n    def chunk(kind, data):\n        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)\n    rows = b''.join(b'\\x00' + os.urandom(width * 3) for _ in range(height))\n    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)\n    return b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')\n";

/// Checks one downscaled 1200 × 800 PNG of `original_bytes`: returned within the bound, aspect
/// ratio kept, its note naming the original, which is byte for byte the one displayed.
fn assert_downscaled(shown: &support::ToolResult, original_bytes: u64, max_bytes: usize) {
    let images = shown.images();
    assert_eq!(
        images.len(),
        1,
        "the image is returned, not dropped: {shown:?}"
    );
    let (mime, bytes) = &images[0];
    assert_eq!(mime, "image/png", "noise gains nothing as JPEG");
    assert!(bytes.len() <= max_bytes, "{} bytes", bytes.len());
    let note = &shown.structured["display_data"][0]["metadata"]["ipython_mcp"]["downscaled_images"]
        ["image/png"];
    assert_eq!(note["original_size"], json!([1200, 800]), "{shown:?}");
    assert_eq!(note["original_bytes"], original_bytes);
    let size = note["size"].as_array().expect("size");
    let (width, height) = (size[0].as_f64().expect("w"), size[1].as_f64().expect("h"));
    assert!(
        (width / height - 1.5).abs() < 0.02,
        "aspect ratio kept: {width}x{height}"
    );
    assert!(
        shown.text().contains("downscaled from 1200x800"),
        "{}",
        shown.text()
    );
    let path = note["original_path"].as_str().expect("original path");
    let original = std::fs::read(path).expect("the original is in the spool");
    assert_eq!(original.len() as u64, original_bytes);
    assert!(original.starts_with(b"\x89PNG"));
}

#[tokio::test]
async fn an_oversized_png_is_downscaled_in_a_kernel_without_pillow() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_MAX_IMAGE_BYTES", "150000")],
    )
    .await;
    let probe = server
        .call(
            "execute",
            json!({"code": "import importlib.util; importlib.util.find_spec('PIL') is None"}),
        )
        .await;
    assert_eq!(
        probe.structured["result"]["text/plain"], "True",
        "the kernel's environment must not have Pillow: {probe:?}"
    );
    let code = format!("{NOISE_PNG}from IPython.display import Image, display\nraw = noise_png(1200, 800)\ndisplay(Image(data=raw))\nlen(raw)");
    let shown = server.call("execute", json!({"code": code})).await;
    assert!(shown.ok(), "{shown:?}");
    let original_bytes: u64 = shown.structured["result"]["text/plain"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .expect("length");
    assert!(original_bytes > 150_000);
    assert_downscaled(&shown, original_bytes, 150_000);
    server.stop().await;
}

#[tokio::test]
async fn a_bash_kernel_s_oversized_png_is_downscaled_by_the_server() {
    let python = support::provisioned_python().await;
    let root = tokio::task::spawn_blocking(move || project_with_venv(&python))
        .await
        .expect("venv");
    let venv_python = root.join("project/.venv/bin/python");
    // Its own JUPYTER_PATH, so it never races the discovery test for the same files.
    let jupyter = root.join("jupyter-images");
    let spec_dir = jupyter.join("kernels/bash");
    std::fs::create_dir_all(&spec_dir).expect("spec dir");
    std::fs::write(
        spec_dir.join("kernel.json"),
        json!({
            "argv": [venv_python, "-m", "bash_kernel", "-f", "{connection_file}"],
            "display_name": "Bash",
            "language": "bash",
        })
        .to_string(),
    )
    .expect("kernel.json");
    let jupyter_path = jupyter.display().to_string();
    let server = Server::start(
        Family::Modern,
        &[
            ("JUPYTER_PATH", &jupyter_path),
            ("JUPYTER_DATA_DIR", &jupyter_path),
            ("IPYTHON_MCP_MAX_IMAGE_BYTES", "150000"),
        ],
    )
    .await;
    let started = server
        .call("kernel_start", json!({"spec": "bash", "kernel": "sh"}))
        .await;
    assert!(started.ok(), "{started:?}");
    assert_eq!(started.structured["status"]["kernel"]["helper"], false);
    // bash_kernel's own `display` sends a file piped to it as an image. Written in the temp
    // directory: the kernel's sandbox lets it write there, not in the test's tree.
    let pictures = tempfile::tempdir().expect("tempdir");
    let picture = pictures.path().join("bash-noise.png");
    let script = format!(
        "{NOISE_PNG}open({:?}, 'wb').write(noise_png(1200, 800))\n",
        picture.display().to_string()
    );
    let code = format!(
        "{} - <<'EOF'\n{script}EOF\nstat -c %s {} > /dev/null && display < {}",
        venv_python.display(),
        picture.display(),
        picture.display()
    );
    let shown = server
        .call("execute", json!({"code": code, "kernel": "sh"}))
        .await;
    assert!(shown.ok(), "{shown:?}");
    let original_bytes = std::fs::metadata(&picture).expect("the picture").len();
    assert!(original_bytes > 150_000);
    assert_downscaled(&shown, original_bytes, 150_000);
    assert_eq!(
        std::fs::read(
            shown.structured["display_data"][0]["metadata"]["ipython_mcp"]["downscaled_images"]
                ["image/png"]["original_path"]
                .as_str()
                .expect("path")
        )
        .expect("original"),
        std::fs::read(&picture).expect("picture")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_cell_showing_20_large_images_answers_and_the_client_does_not_hang() {
    // Twenty images just under the image bound: 28 MB of base64 in one reply without a budget,
    // past the 16 MiB line an MCP client reads, and the client would wait forever.
    let server = Server::start(Family::Handshake, &[]).await;
    let code = "import base64, os\nfrom IPython.display import display\nfor _ in range(20):\n    display({'image/png': base64.b64encode(os.urandom(1_048_000)).decode(), 'text/plain': '<image>'}, raw=True)";
    let shown = tokio::time::timeout(
        Duration::from_secs(300),
        server.call("execute", json!({"code": code})),
    )
    .await
    .expect("the execute answers");
    assert!(shown.ok(), "{shown:?}");
    let images = shown.images();
    let withheld = shown.structured["withheld"].as_array().expect("withheld");
    assert!(
        !images.is_empty() && !withheld.is_empty(),
        "{}",
        shown.text()
    );
    assert_eq!(images.len() + withheld.len(), 20, "none silently dropped");
    let returned: usize = images.iter().map(|(_, bytes)| bytes.len() * 4 / 3).sum();
    assert!(
        returned <= 8 * 1024 * 1024,
        "{returned} bytes of base64 returned"
    );
    for item in withheld {
        assert_eq!(item["mime"], "image/png");
        let path = item["path"].as_str().expect("spooled");
        assert_eq!(std::fs::metadata(path).expect("the file").len(), 1_048_000);
    }
    assert!(shown.text().contains("withheld"), "{}", shown.text());
    // The displays themselves are all listed, the small parts still in the reply.
    assert_eq!(
        shown.structured["display_data"]
            .as_array()
            .expect("displays")
            .len(),
        20
    );
    // get_output answers the same way.
    let id = shown.structured["execution_id"].as_str().expect("id");
    let again = server.call("get_output", json!({"execution_id": id})).await;
    assert_eq!(again.images().len(), images.len());
    assert_eq!(again.structured["withheld"], shown.structured["withheld"]);
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_image_is_downscaled_and_its_original_kept() {
    // Pillow beside the tests, reached through the library paths setting.
    let (_, pillow) = support::python_with("pillow", "PIL", "pillow-deps").await;
    let library = pillow.display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_LIBRARY_PATHS", &library),
            ("IPYTHON_MCP_MAX_IMAGE_BYTES", "150000"),
        ],
    )
    .await;
    let code = "import io\nfrom PIL import Image\nfrom IPython.display import Image as Show, display\nbuffer = io.BytesIO()\nImage.effect_noise((1200, 800), 80).convert('RGB').save(buffer, format='PNG')\nraw = buffer.getvalue()\ndisplay(Show(data=raw))\nlen(raw)";
    let shown = server.call("execute", json!({"code": code})).await;
    assert!(shown.ok(), "{shown:?}");
    let original_bytes: u64 = shown.structured["result"]["text/plain"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .expect("length");
    assert!(original_bytes > 150_000);
    let images = shown.images();
    assert_eq!(
        images.len(),
        1,
        "the image is returned, not dropped: {shown:?}"
    );
    let (mime, bytes) = &images[0];
    assert_eq!(mime, "image/png");
    assert!(bytes.len() <= 150_000, "{} bytes", bytes.len());
    let note = &shown.structured["display_data"][0]["metadata"]["ipython_mcp"]["downscaled_images"]
        ["image/png"];
    assert_eq!(note["original_size"], json!([1200, 800]));
    assert_eq!(note["original_bytes"], original_bytes);
    let size = note["size"].as_array().expect("size");
    let (width, height) = (size[0].as_f64().expect("w"), size[1].as_f64().expect("h"));
    assert!(
        (width / height - 1.5).abs() < 0.02,
        "aspect ratio kept: {width}x{height}"
    );
    assert!(
        shown.text().contains("downscaled from 1200x800"),
        "{}",
        shown.text()
    );
    // The original stays retrievable for that execution.
    let path = note["original_path"].as_str().expect("original path");
    let check = server
        .call(
            "execute",
            json!({"code": format!("import os; (os.path.getsize({path:?}), Image.open({path:?}).size)")}),
        )
        .await;
    assert_eq!(
        check.structured["result"]["text/plain"],
        format!("({original_bytes}, (1200, 800))")
    );
    server.stop().await;
}

/// A session whose actor panics is supervised: it turns `unavailable` with an error saying an
/// internal error stopped it and that kernel_restart recovers it (in runtime_status and in the
/// answer of the call queued behind the panic), its kernel process does not outlive it, calls
/// fail at once until the restart, and kernel_restart brings a fresh actor and kernel in a new
/// epoch.
#[tokio::test]
async fn a_panicking_session_actor_makes_the_session_unavailable_until_kernel_restart() {
    // A queue wait far above the bound below: the queued call must be answered when the actor
    // fails, not when its wait runs out.
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_TEST_MODE", "fixtures"),
            ("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "900"),
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
        ],
    )
    .await;
    let defined = server.call("execute", json!({"code": "kept = 1"})).await;
    assert!(defined.ok(), "{defined:?}");
    let before = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    let pid = before["kernel"]["pid"].as_i64().expect("kernel pid") as i32;
    let spare = before["spare_kernel_pids"][0].as_i64().expect("spare pid") as i32;
    let epoch = before["epoch"].as_u64().expect("epoch");

    // A job holds the kernel while the panic, then a call behind it, queue up.
    let flag = support::Flag::new();
    let spawn = |code: String| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    let job = spawn(flag.wait_code());
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let trigger = server.call_raw("test_panic_session", json!({})).await;
    assert!(!trigger.is_error, "{trigger:?}");
    let queued = spawn("kept + 1".to_owned());
    server.wait_until(|status| status["queue_depth"] == 1).await;
    flag.set();
    let job = job.await.expect("join");
    assert!(job.ok(), "the job ran before the panic: {job:?}");

    let queued = tokio::time::timeout(Duration::from_secs(120), queued)
        .await
        .expect("the queued call is answered when the actor fails")
        .expect("join");
    let error = &queued.structured["error"];
    assert_eq!(error["code"], "runtime_unavailable", "{queued:?}");
    assert_eq!(queued.structured["status"], "rejected", "{queued:?}");
    let says = |error: &Value| {
        error["message"]
            .as_str()
            .is_some_and(|message| message.contains("an internal error stopped"))
            && error["hint"]
                .as_str()
                .is_some_and(|hint| hint.contains("kernel_restart"))
    };
    assert!(says(error), "{queued:?}");
    // Its kernel is gone, so the epoch has moved on, as after a replacement.
    assert_eq!(
        queued.structured["runtime"]["epoch"],
        epoch + 1,
        "{queued:?}"
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(status["state"], "unavailable", "{status}");
    assert_eq!(status["epoch"], epoch + 1, "{status}");
    assert!(says(&status["error"]), "{status}");
    assert_eq!(status["queue_depth"], 0, "{status}");
    assert_eq!(status["operation_active"], false, "{status}");
    assert!(status["kernel"].is_null(), "{status}");
    // The panicked actor's kernel and its spare, with their process groups, are gone.
    assert_eq!(status["spare_kernel_pids"], json!([]), "{status}");
    for kernel in [pid, spare] {
        support::wait_until_gone(kernel).await;
        support::wait_until_group_gone(kernel).await;
    }

    // Until the restart, calls fail at once and run nothing.
    let refused = server.call("execute", json!({"code": "kept"})).await;
    assert!(says(&refused.structured["error"]), "{refused:?}");
    assert_eq!(refused.structured["status"], "rejected", "{refused:?}");

    let restarted = server.call("kernel_restart", json!({})).await;
    assert!(restarted.ok(), "{restarted:?}");
    let restarted = &restarted.structured;
    assert_eq!(restarted["state"], "ready", "{restarted}");
    assert_eq!(restarted["epoch"], epoch + 2, "{restarted}");
    assert_ne!(restarted["kernel"]["pid"].as_i64(), Some(i64::from(pid)));
    assert!(restarted["error"].is_null(), "{restarted}");
    let ran = server.call("execute", json!({"code": "40 + 2"})).await;
    assert!(ran.ok(), "{ran:?}");
    assert!(ran.text().contains("42"), "{ran:?}");
    let gone = server.call("execute", json!({"code": "kept"})).await;
    assert_eq!(
        gone.structured["error"]["ename"], "NameError",
        "a fresh kernel: {gone:?}"
    );
}
