//! Caps shared by readers of untrusted bytes in different layers: the artifact fetcher and
//! render (`flux`) and Helm's release records (`helm`) refuse the same sizes by default, so the
//! constant lives below both.

/// Default cap on the bytes of all unpacked files (`--max-unpacked-size`): fluxcd/pkg's
/// `tar.DefaultMaxUntarSize` (100 MiB), so a revision Flux's own untar accepts by default is
/// accepted here too, and one it refuses cannot grow the converger's disk and memory instead.
/// A Helm release record's decoded size is capped by the same flag.
pub const DEFAULT_MAX_UNPACKED_BYTES: u64 = 100 << 20;
