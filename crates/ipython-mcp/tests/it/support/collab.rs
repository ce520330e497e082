//! A Jupyter server with real-time collaboration (jupyter-collaboration from PyPI), and a
//! scripted person editing its notebooks as JupyterLab would (tests/collab_person.py).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::{provisioned_python, JUPYTER_SERVER};

/// jupyter-collaboration and the packages it is made of, pinned together (they work with
/// `JUPYTER_SERVER`, jupyter_server 2.21.1): the server extension is jupyter-server-ydoc,
/// the document model jupyter-ydoc over pycrdt.
pub const COLLABORATION: [&str; 9] = [
    "jupyter-collaboration==5.0.4",
    "jupyter-server-ydoc==3.0.4",
    "jupyter-ydoc==4.2.1",
    "jupyter-server-fileid==0.10.0",
    "pycrdt==0.14.13",
    "pycrdt-websocket==0.16.5",
    "pycrdt-store==0.1.5",
    "jupyter-collaboration-ui==3.0.4",
    "jupyter-docprovider==3.0.4",
];

/// The provisioned Python and a directory with jupyter_server and `COLLABORATION` installed
/// (once per target directory, `target/tmp/collab-server-deps`).
pub async fn collab_python() -> (std::path::PathBuf, std::path::PathBuf) {
    let python = provisioned_python().await;
    let deps = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("collab-server-deps");
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Written after a complete install: a killed pip leaves no marker and is redone.
    let marker = deps.join(".installed");
    let wanted = format!("{JUPYTER_SERVER} {}", COLLABORATION.join(" "));
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
        let status = std::process::Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args(["--no-input", "-q", "--upgrade", "--target"])
            .arg(&deps)
            .arg(JUPYTER_SERVER)
            .args(COLLABORATION)
            .stdout(Stdio::null())
            .status()
            .expect("pip");
        assert!(status.success(), "installing jupyter-collaboration failed");
        std::fs::write(&marker, &wanted).expect("marker");
    }
    (python, deps)
}

/// A real Jupyter server with the collaboration extension (jupyter_server_ydoc and the file
/// id service it needs, enabled in the server's own config file: a `--target` install leaves
/// theirs where the server does not look), on a free loopback port, token auth, its own config,
/// data, runtime and root directories. Killed on drop, or by [`CollabServer::kill`].
pub struct CollabServer {
    child: std::process::Child,
    pub url: String,
    pub token: String,
    dir: tempfile::TempDir,
}

impl CollabServer {
    pub async fn start() -> CollabServer {
        let (python, deps) = collab_python().await;
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["runtime", "config", "data", "root"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        std::fs::write(
            dir.path().join("config").join("jupyter_server_config.json"),
            json!({"ServerApp": {"jpserver_extensions": {
                "jupyter_server_ydoc": true, "jupyter_server_fileid": true
            }}})
            .to_string(),
        )
        .expect("config");
        let token = format!("tok{}", super::uuid_like());
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
        use std::os::unix::process::CommandExt as _;
        let child = std::process::Command::new(&python)
            .args([
                "-m",
                "jupyter_server",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
            ])
            .args(["--ServerApp.port=0", "--ServerApp.open_browser=False"])
            .arg(format!("--IdentityProvider.token={token}"))
            .arg(format!(
                "--ServerApp.root_dir={}",
                dir.path().join("root").display()
            ))
            // jupyter_server_ydoc writes its `.jupyter_ystore.db` into the working directory:
            // the server's own, never the crate's.
            .current_dir(dir.path())
            .env("PYTHONPATH", &deps)
            .env("JUPYTER_RUNTIME_DIR", dir.path().join("runtime"))
            .env("JUPYTER_CONFIG_DIR", dir.path().join("config"))
            .env("JUPYTER_DATA_DIR", dir.path().join("data"))
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start jupyter server");
        let mut server = CollabServer {
            child,
            url: String::new(),
            token,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            assert!(
                server.child.try_wait().expect("wait").is_none(),
                "jupyter server exited: {}",
                server.log()
            );
            if server.url.is_empty() {
                if let Some(url) = server.runtime_url() {
                    server.url = url;
                }
            }
            if !server.url.is_empty()
                && server
                    .request(reqwest::Method::GET, "api/status", None)
                    .await
                    .0
                    == 200
            {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "jupyter server not ready: {}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn runtime_url(&self) -> Option<String> {
        for entry in std::fs::read_dir(self.dir.path().join("runtime"))
            .ok()?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("jpserver-") && name.ends_with(".json") {
                let text = std::fs::read_to_string(entry.path()).ok()?;
                let info: Value = serde_json::from_str(&text).ok()?;
                return info["url"].as_str().map(str::to_owned);
            }
        }
        None
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The server's root directory (its notebooks on disk).
    pub fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("root")
    }

    /// A client of this server for the crates under test.
    pub fn client(&self) -> ipython_mcp_jupyter::remote::Server {
        ipython_mcp_jupyter::remote::Server::new(
            url::Url::parse(&self.url).expect("url"),
            Some(self.token.clone()),
            Duration::from_secs(60),
        )
        .expect("client")
    }

    /// One request with the token: status and JSON body (null if none); a refused
    /// connection is status 0.
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = super::http_client()
            .request(method, format!("{}{path}", self.url))
            .header("Authorization", format!("token {}", self.token))
            .timeout(Duration::from_secs(60));
        if let Some(body) = body {
            request = request.json(&body);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.text().await.unwrap_or_default();
                (status, serde_json::from_str(&body).unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// Saves `notebook` at `path` through the contents API.
    pub async fn put_notebook(&self, path: &str, notebook: &Value) {
        let (status, body) = self
            .request(
                reqwest::Method::PUT,
                &format!("api/contents/{path}"),
                Some(json!({"type": "notebook", "format": "json", "content": notebook})),
            )
            .await;
        assert!(matches!(status, 200 | 201), "{status}: {body}");
    }

    /// The notebook file at `path` as it is on disk now (None while unreadable).
    pub fn on_disk(&self, path: &str) -> Option<Value> {
        let text = std::fs::read_to_string(self.root().join(path)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Polls the file at `path` until `predicate` holds of it (the server saves the document
    /// after its save delay); panics with the last content after `within`.
    pub async fn wait_on_disk(
        &self,
        path: &str,
        within: Duration,
        predicate: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let current = self.on_disk(path);
            if let Some(notebook) = &current {
                if predicate(notebook) {
                    return notebook.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "the file never held the change: {current:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILLs the server (and anything in its process group) and waits for it.
    pub fn kill(&mut self) {
        // SAFETY: killpg(2) on the group of our own child.
        unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    /// A scripted person who has the notebook at `path` open.
    pub async fn person(&self, path: &str) -> Person {
        Person::join(self, path).await
    }
}

impl Drop for CollabServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// tests/collab_person.py, joined to one notebook's room: send it commands, read answers.
pub struct Person {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Person {
    async fn join(server: &CollabServer, path: &str) -> Person {
        let (python, deps) = collab_python().await;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/collab_person.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .arg(&server.url)
            .arg(path)
            .env("PYTHONPATH", deps)
            .env("JUPYTER_TOKEN", &server.token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the person");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut person = Person {
            child,
            stdin,
            stdout,
        };
        let joined = person.answer().await;
        assert_eq!(joined["ok"], true, "the person could not join: {joined}");
        person
    }

    async fn answer(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(600), self.stdout.next_line())
            .await
            .expect("the person answers")
            .expect("read")
            .expect("the person exited");
        serde_json::from_str(&line).expect("a JSON answer")
    }

    /// Sends one command and returns its answer (whatever its `ok`).
    pub async fn call(&mut self, command: Value) -> Value {
        let mut line = command.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the person");
        self.answer().await
    }

    /// Sends a command that must succeed.
    pub async fn ok(&mut self, command: Value) -> Value {
        let answer = self.call(command.clone()).await;
        assert_eq!(answer["ok"], true, "{command} failed: {answer}");
        answer
    }

    /// The notebook as the person sees it.
    pub async fn read(&mut self) -> Value {
        self.ok(json!({"cmd": "read"})).await["notebook"].clone()
    }

    /// Waits (up to `within`) until `expr` (Python, of `nb`, `cells`, `awareness`) holds;
    /// the notebook then. Panics with the notebook at the deadline.
    pub async fn wait_for(&mut self, expr: &str, within: Duration) -> Value {
        let answer = self
            .call(json!({"cmd": "wait_for", "expr": expr, "timeout": within.as_secs_f64()}))
            .await;
        assert_eq!(answer["ok"], true, "never true: {expr}: {answer}");
        answer["notebook"].clone()
    }

    /// Leaves the room and waits for the script to end.
    pub async fn close(mut self) {
        let _ = self.call(json!({"cmd": "close"})).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}
