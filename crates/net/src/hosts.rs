//! `--net-hosts FILE`: names resolved from a hosts file instead of the system resolver.

use crate::error::NetError;
use dsh_core::net_rules::normalize_host;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

/// Names and their addresses, read from a file in hosts-file format (`ADDRESS NAME [NAME…]`,
/// `#` comments). A name mapped here counts as naming its address: it may resolve to
/// loopback or private space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostsFile {
    names: HashMap<String, Vec<IpAddr>>,
}

impl HostsFile {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<HostsFile, NetError> {
        let text = std::fs::read_to_string(path).map_err(|e| NetError::HostsFile {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        HostsFile::parse(&text).map_err(|reason| NetError::HostsFile {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Parses the text of a hosts file.
    ///
    /// ```
    /// let hosts = dsh_net::HostsFile::parse("127.0.0.2 pkg.test  # a comment\n::1 six.test\n").unwrap();
    /// assert_eq!(hosts.lookup("PKG.test.").unwrap()[0].to_string(), "127.0.0.2");
    /// assert!(hosts.lookup("other.test").is_none());
    /// assert!(dsh_net::HostsFile::parse("not-an-address name").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<HostsFile, String> {
        let mut names: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            let mut words = line.split_whitespace();
            let Some(addr) = words.next() else { continue };
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| format!("line {}: `{addr}` is not an address", n + 1))?;
            let mut any = false;
            for name in words {
                any = true;
                let list = names.entry(normalize_host(name)).or_default();
                if !list.contains(&addr) {
                    list.push(addr);
                }
            }
            if !any {
                return Err(format!("line {}: an address without a name", n + 1));
            }
        }
        Ok(HostsFile { names })
    }

    /// The addresses of `name`, if the file maps it.
    pub fn lookup(&self, name: &str) -> Option<&[IpAddr]> {
        self.names.get(&normalize_host(name)).map(Vec::as_slice)
    }
}
