//! End to end: retained output is bounded in bytes. A finished execution's large displays live
//! in the spool on disk and come back intact through `get_output`; what sessions keep in
//! memory is held to its budget by forgetting the oldest executions.

use crate::support;

use serde_json::{json, Value};
use support::{Family, Server};

/// Code displaying one `size`-byte (decoded) PNG payload of random bytes, `count` times.
fn images(count: usize, size: usize) -> String {
    format!(
        "import base64, os\nfrom IPython.display import display\nfor _ in range({count}):\n    display({{'image/png': base64.b64encode(os.urandom({size})).decode(), 'text/plain': '<image>'}}, raw=True)"
    )
}

fn spool_files(root: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for dir in support::spool_dirs(root) {
        for file in std::fs::read_dir(dir).expect("spool").flatten() {
            if file.file_name().to_string_lossy().ends_with(suffix) {
                found.push(file.path());
            }
        }
    }
    found
}

#[tokio::test]
async fn large_displays_of_finished_executions_live_on_disk_and_come_back_intact() {
    let tmp = tempfile::tempdir().expect("tmp");
    let [(tmp_var, tmp_dir), (run_var, run_dir)] = support::temp_and_private(tmp.path());
    let server = Server::start(
        Family::Handshake,
        &[(tmp_var, &tmp_dir), (run_var, &run_dir)],
    )
    .await;
    let run = server
        .call("execute", json!({"code": images(3, 200_000)}))
        .await;
    assert!(run.ok(), "{run:?}");
    let shown: Vec<Value> = run.structured["display_data"]
        .as_array()
        .expect("displays")
        .clone();
    assert_eq!(shown.len(), 3);
    let spilled = spool_files(tmp.path(), ".view.json");
    assert_eq!(
        spilled.len(),
        1,
        "the displays moved to the spool: {spilled:?}"
    );
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(&spilled[0]).expect("read")).expect("json");
    let on_disk: Vec<(String, Vec<u8>)> = on_disk["display_data"]
        .as_array()
        .expect("displays")
        .iter()
        .map(|item| {
            use base64::Engine as _;
            let png = item["data"]["image/png"].as_str().expect("png");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(png)
                .expect("base64");
            ("image/png".to_owned(), bytes)
        })
        .collect();
    assert_eq!(
        on_disk,
        run.images(),
        "the spool holds exactly what was returned"
    );
    let again = server
        .call(
            "get_output",
            json!({"execution_id": run.structured["execution_id"]}),
        )
        .await;
    assert!(again.ok(), "{again:?}");
    assert_eq!(again.structured["display_data"], Value::Array(shown));
    assert_eq!(
        again.images(),
        run.images(),
        "images come back from disk intact"
    );
    // A small output stays in memory.
    let small = server.call("execute", json!({"code": "print('hi')"})).await;
    assert!(small.ok(), "{small:?}");
    assert_eq!(spool_files(tmp.path(), ".view.json").len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn retained_output_over_its_budget_forgets_the_oldest_executions() {
    // Without a spool everything stays in memory, so the budget is what bounds it.
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_MAX_SPOOL_EXECUTION_BYTES", "0"),
            ("IPYTHON_MCP_MAX_RETAINED_OUTPUT_BYTES", "1000000"),
        ],
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        // About 270 kB each as held (base64 of 200 kB).
        let run = server
            .call("execute", json!({"code": images(1, 200_000)}))
            .await;
        assert!(run.ok(), "{run:?}");
        ids.push(
            run.structured["execution_id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
    }
    let mut known = Vec::new();
    for id in &ids {
        let output = server.call("get_output", json!({"execution_id": id})).await;
        known.push(output.ok());
        if output.ok() {
            assert_eq!(output.images().len(), 1, "a kept execution is whole");
        }
    }
    assert_eq!(
        known,
        [false, false, false, true, true, true],
        "the three newest fit in 1 MB, the oldest are forgotten"
    );
    server.stop().await;
}
