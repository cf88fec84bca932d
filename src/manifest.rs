//! Reading Kubernetes objects from YAML files: multi-document streams and `List`s.
//!
//! Shared by every command that takes objects from a file (`plan`, `converge`, `render`).
//! Errors name the file and the document index so bad input can be found (issue #2).

/// One object read from a YAML stream, with where it came from.
#[derive(Clone, Debug)]
pub struct Document {
    /// The file the object was read from (`-` for stdin).
    pub source: String,
    /// 0-based index of the YAML document in the stream (items of a `List` share their document's index).
    pub index: usize,
    pub object: serde_json::Value,
}

/// Why a YAML input could not be read. Every variant names the source and, where known, the document.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{source_name}: {message}")]
    Invalid {
        source_name: String,
        message: String,
    },
}

/// Reads every object of a YAML file (`-` is stdin): multi-document streams and `List`s are flattened.
pub fn read_documents(path: &str) -> Result<Vec<Document>, ManifestError> {
    let _ = path;
    todo!("issue #2")
}

/// Parses every object of YAML `text` read from `source` (named in errors).
pub fn parse_documents(source: &str, text: &str) -> Result<Vec<Document>, ManifestError> {
    let _ = (source, text);
    todo!("issue #2")
}
