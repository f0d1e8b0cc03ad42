//! The Landlock ruleset of a command, built in dsh (it opens the paths) and applied in the
//! command's process right before exec.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::Path;

/// The newest ABI this code knows the rights of; the kernel may offer fewer (best effort:
/// rights a kernel lacks are simply not handled), but it must offer Landlock.
const ABI_KNOWN: ABI = ABI::V6;

/// Devices a command may write although they lie outside its writable folders.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What a ruleset allows.
pub(crate) struct Rules<'a> {
    /// Folders the command may write (and read): the workspace, the private temp folder.
    pub writable: Vec<&'a Path>,
    /// Network off: no TCP bind or connect, no abstract Unix sockets outside the sandbox.
    pub network_off: bool,
}

/// Whether this kernel's Landlock can scope abstract Unix sockets (ABI 6): then a command
/// with the network off cannot reach a listener outside its sandbox without a network
/// namespace, which costs more to create than the rest of the sandbox.
pub(crate) fn scopes_abstract_sockets() -> bool {
    static SCOPES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SCOPES.get_or_init(|| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .scope(Scope::AbstractUnixSocket)
            .and_then(|r| r.create())
            .is_ok()
    })
}

/// What this kernel's Landlock holds, for the result's meta: its ABI and the rights a
/// best-effort ruleset silently goes without on it. The read-only mounts of the world stand
/// in for most of them (a file outside the writable folders cannot be truncated or renamed
/// on a read-only mount whatever Landlock does); the meta says which are Landlock's own gap.
pub(crate) fn kernel_report() -> serde_json::Value {
    static REPORT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    REPORT
        .get_or_init(|| {
            let abi = kernel_abi();
            let gaps: Vec<&str> = [
                (2, "refer: linking or renaming a file into another folder"),
                (3, "truncate: truncating a file it may read but not write"),
                (4, "tcp: bind and connect (the network filter still holds)"),
                (5, "ioctl_dev: ioctl on devices"),
                (
                    6,
                    "scope: abstract Unix sockets and signals outside the sandbox",
                ),
            ]
            .into_iter()
            .filter(|(needs, _)| abi < *needs)
            .map(|(_, what)| what)
            .collect();
            serde_json::json!({ "abi": abi, "notHeldByLandlock": gaps })
        })
        .clone()
}

/// The newest Landlock ABI this kernel offers (0: none), probed once by asking for each
/// ABI's rights as a hard requirement.
fn kernel_abi() -> u8 {
    let versions = [
        (6, ABI::V6),
        (5, ABI::V5),
        (4, ABI::V4),
        (3, ABI::V3),
        (2, ABI::V2),
        (1, ABI::V1),
    ];
    versions
        .into_iter()
        .find(|(_, abi)| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(*abi))
                .and_then(|r| r.create())
                .is_ok()
        })
        .map_or(0, |(n, _)| n)
}

/// Builds the ruleset and answers its descriptor, or why Landlock cannot be used.
pub(crate) fn ruleset(rules: &Rules<'_>) -> Result<OwnedFd, String> {
    let err = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_KNOWN))
        .map_err(err)?;
    if rules.network_off {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(err)?
            .scope(Scope::AbstractUnixSocket)
            .map_err(err)?;
    }
    // Signals only reach processes of the sandbox: `kill` of anything outside fails.
    ruleset = ruleset.scope(Scope::Signal).map_err(err)?;
    let mut created = ruleset.create().map_err(err)?;
    let open = |path: &Path| {
        PathFd::new(path).map_err(|e| format!("Landlock: opening {}: {e}", path.display()))
    };
    created = created
        .add_rule(PathBeneath::new(
            open(Path::new("/"))?,
            AccessFs::from_read(ABI_KNOWN),
        ))
        .map_err(err)?;
    for dir in &rules.writable {
        created = created
            .add_rule(PathBeneath::new(open(dir)?, AccessFs::from_all(ABI_KNOWN)))
            .map_err(err)?;
    }
    for device in WRITABLE_DEVICES {
        let path = Path::new(device);
        if path.exists() {
            created = created
                .add_rule(PathBeneath::new(
                    open(path)?,
                    AccessFs::from_file(ABI_KNOWN),
                ))
                .map_err(err)?;
        }
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "Landlock is not available in this kernel".to_string())
}
