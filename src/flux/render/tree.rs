//! A local tree (offline `--path`) copied into a scratch root the way Flux packs an artifact,
//! under the caps an artifact is unpacked with.

use std::path::Path;

use super::error::RenderError;
use super::generator;
use crate::flux::artifact::UnpackLimits;

/// Copies a local tree (offline `--path`) into `dest` the way Flux packs an artifact:
/// regular files and directories only, symlinks dropped.
pub fn copy_tree(src: &Path, dest: &Path) -> Result<(), RenderError> {
    copy_tree_within(src, dest, &UnpackLimits::default())
}

/// [`copy_tree`] under the caps an artifact is unpacked with, so a local tree reaches the render
/// no larger than an artifact could: each file is measured before it is read.
pub fn copy_tree_within(src: &Path, dest: &Path, limits: &UnpackLimits) -> Result<(), RenderError> {
    let mut copied = CopyTotals::default();
    copy_dir(src, src, dest, limits, &mut copied)
}

#[derive(Default)]
struct CopyTotals {
    bytes: u64,
    entries: u64,
}

fn copy_dir(
    root: &Path,
    src: &Path,
    dest: &Path,
    limits: &UnpackLimits,
    copied: &mut CopyTotals,
) -> Result<(), RenderError> {
    let io = |p: &Path| {
        let context = format!("copying {}", p.display());
        move |error| RenderError::Io { context, error }
    };
    for entry in std::fs::read_dir(src).map_err(io(src))? {
        let entry = entry.map_err(io(src))?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(io(&path))?;
        let target = dest.join(entry.file_name());
        copied.entries += 1;
        let too_large = |what: String| RenderError::TooLarge {
            file: generator::display_relative(root, &path),
            what,
        };
        if copied.entries > limits.max_entries {
            return Err(too_large(format!(
                "more than {} files and directories in the tree",
                limits.max_entries
            )));
        }
        if file_type.is_dir() {
            std::fs::create_dir_all(&target).map_err(io(&target))?;
            copy_dir(root, &path, &target, limits, copied)?;
        } else if file_type.is_file() {
            let size = entry.metadata().map_err(io(&path))?.len();
            if size > limits.max_file_bytes {
                return Err(too_large(format!(
                    "{size} bytes, more than the maximum file size of {} bytes",
                    limits.max_file_bytes
                )));
            }
            copied.bytes = copied.bytes.saturating_add(size);
            if copied.bytes > limits.max_bytes {
                return Err(too_large(format!(
                    "the tree holds more than the maximum of {} bytes",
                    limits.max_bytes
                )));
            }
            std::fs::copy(&path, &target).map_err(io(&path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn copy_tree_within_measures_each_file_before_reading_it() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "a/small.yaml", "x: 1\n");
        write(src.path(), "a/b/big.yaml", &"#".repeat(300));
        let limits = |max_bytes, max_file_bytes, max_entries| UnpackLimits {
            max_bytes,
            max_file_bytes,
            max_entries,
        };
        for (l, refused) in [
            (limits(1000, 300, 10), None),
            (
                limits(1000, 299, 10),
                Some("./a/b/big.yaml: 300 bytes, more than the maximum file size of 299 bytes"),
            ),
            (
                limits(304, 300, 10),
                Some("more than the maximum of 304 bytes"),
            ),
            (
                limits(1000, 300, 3),
                Some("more than 3 files and directories"),
            ),
        ] {
            let dest = tempfile::tempdir().unwrap();
            match (copy_tree_within(src.path(), dest.path(), &l), refused) {
                (Ok(()), None) => {
                    assert!(dest.path().join("a/b/big.yaml").is_file());
                }
                (Err(e), Some(needle)) => {
                    assert!(e.to_string().contains(needle), "{l:?}: {e}");
                    assert!(e.is_bad_input());
                }
                (got, _) => panic!("{l:?}: {got:?}"),
            }
        }
    }
}
