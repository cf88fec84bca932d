//! `flux-converger render` (to be implemented).

use super::Exit;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub async fn run(args: Args) -> anyhow::Result<Exit> {
    let _ = args;
    anyhow::bail!("`render` is not implemented yet")
}
