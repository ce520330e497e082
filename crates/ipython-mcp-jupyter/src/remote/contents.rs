//! Notebooks in a Jupyter server's contents (`api/contents`): read with the SHA-256 of the
//! file's bytes (`hash=1`, jupyter_server 2.11 and later), write, list.
//!
//! The contents API has no conditional write: a caller that must not overwrite a change checks
//! the hash just before it writes (see the notebook tools). Paths are checked by the caller
//! (plain components, no `..`) and percent-encoded here, so no path can leave `api/contents/`.

use hyper::Method;
use serde::Deserialize;

use super::Server;
use crate::error::Error;

/// A notebook file on the server, as the contents API describes it.
#[derive(Debug, Clone)]
pub struct ContentsNotebook {
    /// nbformat 4 JSON (`None` when asked without content).
    pub content: Option<serde_json::Value>,
    /// Lowercase hex SHA-256 of the file's bytes, when the server computes it.
    pub hash: Option<String>,
    pub last_modified: Option<String>,
    /// Size of the file, when the server says.
    pub size: Option<u64>,
}

#[derive(Deserialize)]
struct Model {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    content: Option<serde_json::Value>,
    #[serde(default)]
    hash: Option<String>,
    #[serde(default)]
    hash_algorithm: Option<String>,
    #[serde(default)]
    last_modified: Option<String>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    path: String,
}

/// Every byte outside the unreserved set is encoded, except `/` between components.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

fn contents_url(path: &str, query: &str) -> String {
    let encoded = percent_encoding::utf8_percent_encode(path, PATH_SEGMENT);
    format!("api/contents/{encoded}?{query}")
}

impl Server {
    /// The notebook at `path` (relative to the server's root), with its content when `content`,
    /// and the hash of its bytes. [`Error::RemoteNotFound`] when there is none.
    pub async fn get_notebook(&self, path: &str, content: bool) -> Result<ContentsNotebook, Error> {
        let what = format!("notebook {path}");
        let query = if content {
            "type=notebook&content=1&hash=1"
        } else {
            "content=0&hash=1"
        };
        let body = self
            .call(
                Method::GET,
                &contents_url(path, query),
                None,
                &what,
                self.inner.timeout,
            )
            .await?;
        let model: Model = self.parse(&body, &what)?;
        if model.kind != "notebook" && model.kind != "file" {
            return Err(Error::RemoteNotFound { what });
        }
        Ok(notebook_of(model))
    }

    /// Whether the server has a notebook at `path` (without reading it).
    pub async fn notebook_exists(&self, path: &str) -> Result<bool, Error> {
        let what = format!("notebook {path}");
        match self
            .call(
                Method::GET,
                &contents_url(path, "content=0"),
                None,
                &what,
                self.inner.timeout,
            )
            .await
        {
            Ok(body) => {
                let model: Model = self.parse(&body, &what)?;
                Ok(model.kind == "notebook" || model.kind == "file")
            }
            Err(Error::RemoteNotFound { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Writes `notebook` (nbformat 4 JSON) to `path`, creating or replacing the file.
    pub async fn put_notebook(
        &self,
        path: &str,
        notebook: &serde_json::Value,
    ) -> Result<(), Error> {
        let what = format!("saving notebook {path}");
        let body = serde_json::json!({
            "type": "notebook",
            "format": "json",
            "content": notebook,
        });
        self.call(
            Method::PUT,
            &contents_url(path, ""),
            Some(body),
            &what,
            self.inner.timeout,
        )
        .await
        .map(drop)
    }

    /// Makes directory `path` (its parent must exist); one that exists already is kept.
    pub async fn ensure_directory(&self, path: &str) -> Result<(), Error> {
        let what = format!("directory {path}");
        let body = serde_json::json!({ "type": "directory" });
        self.call(
            Method::PUT,
            &contents_url(path, ""),
            Some(body),
            &what,
            self.inner.timeout,
        )
        .await
        .map(drop)
    }

    /// The paths of the notebooks in directory `dir` ("" for the root) and, down to `depth`
    /// levels, in its subdirectories; at most `limit` of them. Hidden entries are the server's
    /// business (it lists none unless configured to). A `dir` that does not exist holds none.
    pub async fn list_notebooks(
        &self,
        dir: &str,
        depth: usize,
        limit: usize,
    ) -> Result<Vec<String>, Error> {
        let mut found = Vec::new();
        let mut pending = vec![(dir.to_owned(), 0usize)];
        while let Some((dir, level)) = pending.pop() {
            let what = format!("directory {dir:?}");
            let listed = self
                .call(
                    Method::GET,
                    &contents_url(&dir, "content=1"),
                    None,
                    &what,
                    self.inner.timeout,
                )
                .await;
            let body = match listed {
                Err(Error::RemoteNotFound { .. }) if level == 0 => return Ok(Vec::new()),
                other => other?,
            };
            let model: DirectoryModel = self.parse(&body, &what)?;
            for entry in model.content {
                match entry.kind.as_str() {
                    "notebook" => found.push(entry.path),
                    "directory" if level < depth => pending.push((entry.path, level + 1)),
                    _ => {}
                }
                if found.len() >= limit {
                    found.sort();
                    return Ok(found);
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

#[derive(Deserialize)]
struct DirectoryModel {
    #[serde(default)]
    content: Vec<Model>,
}

fn notebook_of(model: Model) -> ContentsNotebook {
    // Only a SHA-256 is comparable with the revisions of local files.
    let hash = model
        .hash
        .filter(|_| model.hash_algorithm.as_deref().unwrap_or("sha256") == "sha256")
        .map(|hash| hash.to_ascii_lowercase());
    ContentsNotebook {
        content: model.content,
        hash,
        last_modified: model.last_modified,
        size: model.size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_component_by_component() {
        assert_eq!(
            contents_url("work dir/分析 #1.ipynb", "content=0"),
            "api/contents/work%20dir/%E5%88%86%E6%9E%90%20%231.ipynb?content=0"
        );
        assert_eq!(
            contents_url("a?b=c.ipynb", ""),
            "api/contents/a%3Fb%3Dc.ipynb?"
        );
    }
}
