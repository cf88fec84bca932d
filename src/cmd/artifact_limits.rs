//! The caps on an artifact, as flags: `render` takes them, and `serve` flattens the same
//! struct so one tenant's artifact is bounded the same way in both.

use flux_converger::flux::artifact::{
    DEFAULT_MAX_DOWNLOAD_BYTES, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_UNPACKED_BYTES, FetchOptions, UnpackLimits,
};
use flux_converger::quantity::Quantity;

/// Sizes are bytes or Kubernetes quantities (`100Mi`, `1G`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Artifact limits")]
pub struct ArtifactLimitArgs {
    /// Maximum artifact download (compressed) size.
    #[arg(long, value_name = "SIZE", env = "FLUX_CONVERGER_MAX_ARTIFACT_SIZE",
          default_value_t = DEFAULT_MAX_DOWNLOAD_BYTES, value_parser = parse_size)]
    pub max_artifact_size: u64,
    /// Maximum size of all unpacked files together (Flux's untar default: 100Mi).
    #[arg(long, value_name = "SIZE", env = "FLUX_CONVERGER_MAX_UNPACKED_SIZE",
          default_value_t = DEFAULT_MAX_UNPACKED_BYTES, value_parser = parse_size)]
    pub max_unpacked_size: u64,
    /// Maximum size of one unpacked file, refused before it is read.
    #[arg(long, value_name = "SIZE", env = "FLUX_CONVERGER_MAX_FILE_SIZE",
          default_value_t = DEFAULT_MAX_FILE_BYTES, value_parser = parse_size)]
    pub max_file_size: u64,
    /// Maximum number of entries (files, directories, links) in an artifact.
    #[arg(long, value_name = "N", env = "FLUX_CONVERGER_MAX_ARTIFACT_ENTRIES",
          default_value_t = DEFAULT_MAX_ENTRIES)]
    pub max_artifact_entries: u64,
}

impl Default for ArtifactLimitArgs {
    fn default() -> Self {
        Self {
            max_artifact_size: DEFAULT_MAX_DOWNLOAD_BYTES,
            max_unpacked_size: DEFAULT_MAX_UNPACKED_BYTES,
            max_file_size: DEFAULT_MAX_FILE_BYTES,
            max_artifact_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

impl ArtifactLimitArgs {
    pub fn unpack_limits(&self) -> UnpackLimits {
        UnpackLimits {
            max_bytes: self.max_unpacked_size,
            max_entries: self.max_artifact_entries,
            max_file_bytes: self.max_file_size,
        }
    }

    /// Fetch options with these caps and defaults for the rest.
    pub fn fetch_options(&self) -> FetchOptions {
        FetchOptions {
            max_download_bytes: self.max_artifact_size,
            unpack: self.unpack_limits(),
            ..FetchOptions::default()
        }
    }
}

/// A size flag: whole bytes, written plainly or as a quantity.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let quantity = Quantity::parse(text).map_err(|e| e.to_string())?;
    let nanos = quantity.nanos();
    if nanos < 0 || nanos % 1_000_000_000 != 0 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    u64::try_from(nanos / 1_000_000_000).map_err(|_| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn sizes_by_table() {
        for (text, expected) in [
            ("0", Ok(0)),
            ("1048576", Ok(1 << 20)),
            ("100Mi", Ok(100 << 20)),
            ("1G", Ok(1_000_000_000)),
            ("4Gi", Ok(4 << 30)),
            ("1.5Ki", Ok(1536)),
            ("0.5", Err(())),
            ("-1", Err(())),
            ("100m", Err(())),
            ("lots", Err(())),
        ] {
            assert_eq!(parse_size(text).map_err(|_| ()), expected, "{text}");
        }
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        limits: ArtifactLimitArgs,
    }

    #[test]
    fn flags_fill_the_limits_and_default_to_flux_sizes() {
        let defaults = Cli::try_parse_from(["x"]).expect("parse").limits;
        assert_eq!(defaults, ArtifactLimitArgs::default());
        assert_eq!(defaults.unpack_limits(), UnpackLimits::default());
        assert_eq!(defaults.max_unpacked_size, 100 << 20);
        let set = Cli::try_parse_from([
            "x",
            "--max-artifact-size",
            "1Mi",
            "--max-unpacked-size",
            "2Mi",
            "--max-file-size",
            "512Ki",
            "--max-artifact-entries",
            "10",
        ])
        .expect("parse")
        .limits;
        let options = set.fetch_options();
        assert_eq!(options.max_download_bytes, 1 << 20);
        assert_eq!(
            options.unpack,
            UnpackLimits {
                max_bytes: 2 << 20,
                max_entries: 10,
                max_file_bytes: 512 << 10
            }
        );
    }
}
