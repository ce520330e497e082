use std::time::{Duration, Instant};
use ipython_mcp_jupyter::{protocol::*, Channel, Kernel, LaunchSpec};

#[tokio::main]
async fn main() {
    let python = std::env::args().nth(1).expect("python");
    let t = Instant::now();
    let kernel = Kernel::launch(&LaunchSpec { python: python.into(), env: vec![], working_dir: None }, Duration::from_secs(10)).await.unwrap();
    eprintln!("ready in {:?}: {}", t.elapsed(), kernel.info().implementation_version);
    for code in ["x = 1", "x = x + 1; print(x)", "1/0"] {
        let t = Instant::now();
        let msg = JupyterMessage::new(ExecuteRequest { code: code.into(), silent: false, store_history: true, user_expressions: None, allow_stdin: false, stop_on_error: false }, None);
        let (_id, mut rx) = kernel.request(Channel::Shell, msg).await.unwrap();
        let (mut reply, mut idle) = (false, false);
        while !(reply && idle) {
            let r = rx.recv().await.unwrap();
            match &r.message.content {
                JupyterMessageContent::ExecuteReply(_) => reply = true,
                JupyterMessageContent::Status(s) if s.execution_state == ExecutionState::Idle => idle = true,
                other => eprintln!("  {}: {:?}", r.channel.name(), other.message_type()),
            }
        }
        eprintln!("{code}: {:?}", t.elapsed());
    }
    let t = Instant::now();
    kernel.shutdown(Duration::from_secs(2)).await;
    eprintln!("shutdown {:?}", t.elapsed());
}
