//! Which kernel session runs which notebook. A notebook is bound to one session; a session
//! may run several notebooks (they then share variables). The map only names sessions: the
//! kernel manager says whether one still runs, and a binding to a stopped one is forgotten
//! when it is next looked up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ipython_mcp_kernel::SessionId;

/// Notebook file (absolute path, or a `jupyter:` notebook's key) to session.
#[derive(Default)]
pub(crate) struct Bindings {
    map: Mutex<BTreeMap<PathBuf, SessionId>>,
}

impl Bindings {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, SessionId>> {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn get(&self, notebook: &Path) -> Option<SessionId> {
        self.lock().get(notebook).cloned()
    }

    /// Binds `notebook` to `id`, replacing an earlier binding.
    pub(crate) fn bind(&self, notebook: PathBuf, id: SessionId) {
        self.lock().insert(notebook, id);
    }

    /// Forgets `notebook`'s binding if it is still to `id` (a stale one: its session stopped).
    pub(crate) fn forget(&self, notebook: &Path, id: &SessionId) {
        let mut map = self.lock();
        if map.get(notebook) == Some(id) {
            map.remove(notebook);
        }
    }

    /// Forgets `notebook`'s binding; returns its session and the notebooks still bound to it.
    pub(crate) fn unbind(&self, notebook: &Path) -> Option<(SessionId, Vec<PathBuf>)> {
        let mut map = self.lock();
        let id = map.remove(notebook)?;
        let others = map
            .iter()
            .filter(|(_, bound)| **bound == id)
            .map(|(path, _)| path.clone())
            .collect();
        Some((id, others))
    }

    /// The notebooks bound to session `id`.
    pub(crate) fn of(&self, id: &str) -> Vec<PathBuf> {
        self.lock()
            .iter()
            .filter(|(_, bound)| bound.as_str() == id)
            .map(|(path, _)| path.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> SessionId {
        SessionId::parse(text).expect("valid id")
    }

    #[test]
    fn a_session_runs_several_notebooks_and_unbinding_names_the_others() {
        let bindings = Bindings::default();
        bindings.bind("/w/a.ipynb".into(), id("k1"));
        bindings.bind("/w/b.ipynb".into(), id("k1"));
        bindings.bind("/w/c.ipynb".into(), id("k2"));
        assert_eq!(
            bindings.of("k1"),
            vec![PathBuf::from("/w/a.ipynb"), PathBuf::from("/w/b.ipynb")]
        );
        let (session, others) = bindings.unbind(Path::new("/w/a.ipynb")).expect("bound");
        assert_eq!(session, id("k1"));
        assert_eq!(others, vec![PathBuf::from("/w/b.ipynb")]);
        assert_eq!(bindings.unbind(Path::new("/w/a.ipynb")), None);
        let (_, others) = bindings.unbind(Path::new("/w/c.ipynb")).expect("bound");
        assert!(others.is_empty());
    }

    #[test]
    fn a_stale_binding_is_forgotten_only_if_it_was_not_replaced() {
        let bindings = Bindings::default();
        let notebook = Path::new("/w/a.ipynb");
        bindings.bind(notebook.into(), id("k1"));
        // Rebound to a new session before the stale lookup got to forget the old one.
        bindings.bind(notebook.into(), id("k2"));
        bindings.forget(notebook, &id("k1"));
        assert_eq!(bindings.get(notebook), Some(id("k2")));
        bindings.forget(notebook, &id("k2"));
        assert_eq!(bindings.get(notebook), None);
    }
}
