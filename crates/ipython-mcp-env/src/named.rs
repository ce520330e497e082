//! Named environments: `<workspace>/<name>`, a virtualenv without system site
//! packages holding the user's pinned requirements plus ipykernel, created once from the
//! server's chosen Python and reused on every start.
//!
//! Invariants:
//! - **Reuse only what matches.** The metadata file records the Python `major.minor` and the
//!   requirements fingerprint; an environment is reused only when both equal what this server
//!   wants and its interpreter still imports ipykernel. Anything else is an error asking for a
//!   new name: the directory is the user's and is never deleted or rebuilt behind their back.
//! - **Atomic and locked**, as the managed default environment: built in
//!   `<workspace>/.ipython-mcp-tmp-*`, metadata written last, renamed into place under an
//!   exclusive `flock` on `<workspace>/.<name>.lock`; temp dirs are removed on every failure.
//! - **Metadata holds no failure and no secret.** It is written only after a successful
//!   verification; requirements are recorded with URL credentials masked (the fingerprint is
//!   taken over the unmasked list, so a changed token is a changed dependency set).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipython_mcp_config::{NamedEnvironment, Redactor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::confine::Confinement;
use crate::error::Error;
use crate::lock;
use crate::managed::{
    self, Base, Provisioned, Provisioner, Recipe, IPYKERNEL_REQUIREMENT, LOCK_MARGIN,
    METADATA_FILE, STALE_TEMP_AGE,
};
use crate::phase::Phase;
use crate::probe::{self, Report};

/// Prefix of build directories in the workspace: specific, since the workspace is the user's.
const TEMP_PREFIX: &str = ".ipython-mcp-tmp-";

const FORMAT: u32 = 1;
const KIND: &str = "named";

#[derive(Serialize, Deserialize)]
struct Metadata {
    format: u32,
    kind: String,
    name: String,
    python_version: String,
    python_major_minor: String,
    requirements_fingerprint: String,
    /// For people reading the file; URL credentials masked.
    requirements: Vec<String>,
    ipykernel_version: String,
    tool: String,
    created_unix: u64,
}

/// The canonical requirements fingerprint: SHA-256 (hex) of the sorted, de-duplicated list
/// serialized as a compact JSON array. The configuration already canonicalizes each string.
pub fn fingerprint(requirements: &[String]) -> String {
    let mut sorted = requirements.to_vec();
    sorted.sort();
    sorted.dedup();
    let json = serde_json::to_string(&sorted).expect("strings serialise");
    Sha256::digest(json.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

enum Check {
    Absent,
    Ready(Report),
    Mismatch {
        recorded_python: String,
        recorded_fingerprint: String,
    },
    Unusable(String),
    /// Its interpreter did not answer the probe in time: nothing is proven either way.
    Unanswered(String),
}

/// Returns the ready named environment, creating it if it does not exist yet.
pub(crate) async fn ensure(
    provisioner: &Provisioner<'_>,
    named: &NamedEnvironment,
    base: &Base,
    project: &Path,
) -> Result<Provisioned, Error> {
    (provisioner.progress)(Phase::Validating);
    validate_workspace(named, project).await?;
    let target = named.path();
    let executable = target.join("bin").join("python");
    let wanted = Wanted {
        named,
        base,
        target,
        executable,
        fingerprint: fingerprint(&named.requirements),
    };

    // Fast path without the lock: the directory only appears complete.
    if let Some(ready) = wanted
        .existing(provisioner.probe_timeout, provisioner.confinement)
        .await?
    {
        return Ok(ready);
    }
    (provisioner.progress)(Phase::Locking);
    let lock_path = named.workspace.join(format!(".{}.lock", named.name));
    let _held = lock::acquire(&lock_path, provisioner.install_timeout + LOCK_MARGIN).await?;
    if let Some(ready) = wanted
        .existing(provisioner.probe_timeout, provisioner.confinement)
        .await?
    {
        tracing::debug!(name = %named.name, "named environment built by another process");
        return Ok(ready);
    }
    managed::clean_stale_temps(
        &named.workspace,
        TEMP_PREFIX,
        STALE_TEMP_AGE.max(provisioner.install_timeout * 2),
    )
    .await;
    create(provisioner, wanted).await
}

/// The named environment this server wants, and where it lives.
struct Wanted<'a> {
    named: &'a NamedEnvironment,
    base: &'a Base,
    target: PathBuf,
    executable: PathBuf,
    /// Of the requirements as configured (see [`fingerprint`]).
    fingerprint: String,
}

impl Wanted<'_> {
    /// The environment at the target when it is ready and matches; `None` when there is none;
    /// an error when something is there that must not be reused.
    async fn existing(
        &self,
        probe_timeout: Duration,
        confinement: &Confinement,
    ) -> Result<Option<Provisioned>, Error> {
        let found = check(
            &self.target,
            &self.base.major_minor,
            &self.fingerprint,
            probe_timeout,
            confinement,
        )
        .await;
        self.decide(found)
    }

    /// What a check of the target means for this start: reuse, build, or refuse.
    fn decide(&self, check: Check) -> Result<Option<Provisioned>, Error> {
        match check {
            Check::Absent => Ok(None),
            Check::Ready(report) => Ok(Some(Provisioned {
                executable: self.executable.clone(),
                report,
                provision_seconds: None,
            })),
            Check::Mismatch {
                recorded_python,
                recorded_fingerprint,
            } => Err(Error::Mismatch {
                name: self.named.name.clone(),
                path: self.target.clone(),
                recorded: describe(&recorded_python, &recorded_fingerprint),
                wanted: describe(&self.base.major_minor, &self.fingerprint),
            }),
            Check::Unusable(detail) => Err(Error::Unusable {
                name: self.named.name.clone(),
                path: self.target.clone(),
                detail,
            }),
            Check::Unanswered(detail) => Err(Error::Probe {
                python: self.executable.clone(),
                detail: format!(
                    "{detail}; the environment was left as it is (a busy machine can be this slow: try again)"
                ),
            }),
        }
    }
}

/// Builds the environment (under the caller's lock) with the requirements plus ipykernel,
/// recording them in its metadata with URL credentials masked.
async fn create(provisioner: &Provisioner<'_>, wanted: Wanted<'_>) -> Result<Provisioned, Error> {
    let Wanted {
        named,
        base,
        target,
        executable,
        fingerprint: wanted_fingerprint,
    } = wanted;
    let started = Instant::now();
    let masked: Vec<String> = named
        .requirements
        .iter()
        .map(|requirement| Redactor::default().redact(requirement))
        .collect();
    let metadata = |report: &Report, ipykernel_version: &str, tool: &str| {
        serde_json::to_value(Metadata {
            format: FORMAT,
            kind: KIND.to_owned(),
            name: named.name.clone(),
            python_version: report.python_version.clone(),
            python_major_minor: report.major_minor().unwrap_or_default(),
            requirements_fingerprint: wanted_fingerprint.clone(),
            requirements: masked.clone(),
            ipykernel_version: ipykernel_version.to_owned(),
            tool: tool.to_owned(),
            created_unix: managed::unix_now(),
        })
        .expect("metadata serialises")
    };
    let mut requirements = named.requirements.clone();
    requirements.push(IPYKERNEL_REQUIREMENT.to_owned());
    let recipe = Recipe {
        label: format!("the environment {:?}", named.name),
        packages: if named.requirements.is_empty() {
            "ipykernel"
        } else {
            "the requirements and ipykernel"
        },
        requirements,
        prompt: &named.name,
        temp_prefix: TEMP_PREFIX,
        metadata: &metadata,
    };
    let report = provisioner
        .build(base, &named.workspace, &target, &recipe)
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    tracing::info!(name = %named.name, seconds, "created named environment");
    Ok(Provisioned {
        executable,
        report,
        provision_seconds: Some(seconds),
    })
}

/// The workspace exists (created if needed) and, links resolved, is outside the project.
async fn validate_workspace(named: &NamedEnvironment, project: &Path) -> Result<(), Error> {
    let unusable = |detail: String| Error::Workspace {
        name: named.name.clone(),
        workspace: named.workspace.clone(),
        detail,
    };
    tokio::fs::create_dir_all(&named.workspace)
        .await
        .map_err(|err| unusable(format!("it cannot be created: {err}")))?;
    let workspace = tokio::fs::canonicalize(&named.workspace)
        .await
        .map_err(|err| unusable(err.to_string()))?;
    if !tokio::fs::metadata(&workspace)
        .await
        .is_ok_and(|metadata| metadata.is_dir())
    {
        return Err(unusable("it is not a directory".to_owned()));
    }
    if let Ok(project) = tokio::fs::canonicalize(project).await {
        if workspace.starts_with(&project) || project.starts_with(workspace.join(&named.name)) {
            return Err(unusable(format!(
                "it resolves to {}, inside the project {}; choose a workspace outside it",
                workspace.display(),
                project.display()
            )));
        }
    }
    Ok(())
}

/// What is at `target`: nothing, a matching environment, or something we must not touch.
async fn check(
    target: &Path,
    wanted_python: &str,
    wanted_fingerprint: &str,
    probe_timeout: Duration,
    confinement: &Confinement,
) -> Check {
    let bytes = match crate::managed::read_metadata(target).await {
        Ok(bytes) => bytes,
        Err(_) if tokio::fs::symlink_metadata(target).await.is_err() => return Check::Absent,
        Err(_) => {
            return Check::Unusable(
                "it has no ipython-mcp metadata file (it was not created by ipython-mcp)"
                    .to_owned(),
            )
        }
    };
    let metadata = match serde_json::from_slice::<Metadata>(&bytes) {
        Ok(metadata) if metadata.format == FORMAT && metadata.kind == KIND => metadata,
        _ => {
            return Check::Unusable(format!(
                "its metadata file {METADATA_FILE} is not that of a named environment"
            ))
        }
    };
    if metadata.python_major_minor != wanted_python
        || metadata.requirements_fingerprint != wanted_fingerprint
    {
        return Check::Mismatch {
            recorded_python: metadata.python_major_minor,
            recorded_fingerprint: metadata.requirements_fingerprint,
        };
    }
    match probe::environment(target, probe_timeout, confinement).await {
        Ok(report) => match &report.ipykernel {
            Ok(_) => Check::Ready(report),
            Err(reason) => Check::Unusable(format!("ipykernel cannot be imported: {reason}")),
        },
        Err(failure) if failure.timed_out => Check::Unanswered(failure.detail),
        Err(failure) => Check::Unusable(format!("its python does not run: {failure}")),
    }
}

/// "Python 3.11 with requirements fingerprint 1a2b3c4d5e6f" (12 hex digits tell two apart).
fn describe(python: &str, fingerprint: &str) -> String {
    let short = ipython_mcp_text::cut(fingerprint, 12).kept;
    format!("Python {python} with requirements fingerprint {short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_ignores_order_and_duplicates() {
        let a = fingerprint(&["six==1.16.0".to_owned(), "iniconfig==2.0.0".to_owned()]);
        let b = fingerprint(&[
            "iniconfig==2.0.0".to_owned(),
            "six==1.16.0".to_owned(),
            "six==1.16.0".to_owned(),
        ]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(a, fingerprint(&["six==1.15.0".to_owned()]));
        // SHA-256 of `[]`.
        assert_eq!(
            fingerprint(&[]),
            "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
        );
    }

    async fn unconfined_check(target: &Path) -> Check {
        check(
            target,
            "3.11",
            "x",
            probe::PROBE_TIMEOUT,
            &Confinement::default(),
        )
        .await
    }

    #[tokio::test]
    async fn a_foreign_directory_is_unusable_not_replaced() {
        let workspace = tempfile::tempdir().expect("tempdir");
        let target = workspace.path().join("mine");
        assert!(matches!(unconfined_check(&target).await, Check::Absent));
        std::fs::create_dir(&target).expect("mkdir");
        assert!(matches!(
            unconfined_check(&target).await,
            Check::Unusable(_)
        ));
        std::fs::write(
            target.join(METADATA_FILE),
            r#"{"format":1,"python_version":"3.11.7","ipykernel_version":"7.1.0","tool":"pip","created_unix":1}"#,
        )
        .expect("write");
        assert!(
            matches!(
                check(
                    &target,
                    "3.11",
                    "x",
                    probe::PROBE_TIMEOUT,
                    &Confinement::default()
                )
                .await,
                Check::Unusable(_)
            ),
            "default-environment metadata is not a named environment's"
        );
    }

    #[tokio::test]
    async fn a_workspace_inside_the_project_through_a_link_is_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let project = root.path().join("project");
        std::fs::create_dir_all(project.join("envs")).expect("mkdir");
        let link = root.path().join("link");
        std::os::unix::fs::symlink(project.join("envs"), &link).expect("symlink");
        let named = NamedEnvironment {
            workspace: link,
            name: "a".to_owned(),
            requirements: Vec::new(),
            python: None,
        };
        let error = validate_workspace(&named, &project)
            .await
            .expect_err("inside the project");
        assert_eq!(error.phase(), "validate");
        assert!(error.to_string().contains("inside the project"), "{error}");
        let outside = NamedEnvironment {
            workspace: root.path().join("elsewhere/envs"),
            ..named
        };
        validate_workspace(&outside, &project)
            .await
            .expect("created and outside");
        assert!(outside.workspace.is_dir());
    }
}
