//! `allocsoak dash`: the dashboard over a state dir, served or exported.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Result;
use soak::dash::Site;
use soak::engines::project::Project;
use soak::foundation::config::Config;

#[derive(clap::Args)]
pub struct Args {
    /// The state dir the soak runs with.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
    /// The port to serve on.
    #[arg(long, default_value_t = 8077)]
    port: u16,
    /// The address to serve on. Default: loopback only. Another exposes
    /// the soak's crash reports to whoever reaches it.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    /// Write the pages to this folder (they open from file://) instead of serving.
    #[arg(long)]
    export: Option<PathBuf>,
}

pub fn run(args: Args, _project: Project, config: Config) -> Result<bool> {
    let site = Site::open(&args.state, config.drift.trend())?;
    if let Some(out) = args.export {
        site.export(&out)?;
        println!("dash: exported to {}/index.html", out.display());
        return Ok(true);
    }
    if !args.bind.is_loopback() {
        eprintln!(
            "allocsoak: warning: serving on {} is not loopback only: anyone who reaches it reads every crash report and input",
            args.bind
        );
    }
    soak::dash::serve(&site, SocketAddr::new(args.bind, args.port))?;
    Ok(true)
}
