//! What Linux's `/proc` says about a process, for `dq bench topics`: its CPU
//! time, which process listens on a TCP port, its open files and its
//! command line. Only processes of this user (or any, as root) are visible.

use std::process::Command;

use anyhow::{Context, Result, anyhow};

/// Clock ticks per second of the times in `/proc/<pid>/stat`, and where the
/// figure came from: `getconf CLK_TCK` (which asks `sysconf(_SC_CLK_TCK)`;
/// this workspace forbids the unsafe code a direct libc call needs), else
/// 100, the value of every Linux architecture dq runs on.
pub(super) fn clock_ticks() -> (u64, &'static str) {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|&t| t > 0)
        .map_or((100, "assumed"), |t| (t, "getconf CLK_TCK"))
}

/// CPU time `pid` has used so far (user + system), in clock ticks.
///
/// # Errors
/// No such process, or its stat line is not as documented in proc(5).
pub(super) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    stat_cpu_ticks(&stat).ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat: {stat:?}"))
}

/// utime + stime (fields 14 and 15) of a stat line. The command name (field
/// 2) is in parentheses and may hold spaces and parentheses itself, so the
/// fields are counted after its last `)`.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state).
    let mut fields = rest.split_whitespace().skip(14 - 3);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The process listening on TCP `port` (on any address, IPv4 or IPv6):
/// the LISTEN socket's inode from `/proc/net/tcp{,6}`, then the process
/// holding `socket:[inode]` among its `/proc/<pid>/fd` links.
pub(super) fn listener_of(port: u16) -> Option<u32> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|table| listen_inodes(&table, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    pids().into_iter().find(|&pid| {
        open_files(pid)
            .iter()
            .any(|f| wanted.iter().any(|w| w == f))
    })
}

/// The inodes of the sockets listening on `port` in a `/proc/net/tcp`
/// table (header line, then `sl local_address rem_address st … uid
/// timeout inode …`, addresses as `HEXADDR:HEXPORT`, state 0A = LISTEN).
fn listen_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (_, p) = f.get(1)?.rsplit_once(':')?;
            let listening = *f.get(3)? == "0A";
            (listening && u16::from_str_radix(p, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// Every process id in `/proc`.
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// What the file descriptors of `pid` point to (paths, `socket:[inode]`,
/// …); empty when this user may not look.
pub(super) fn open_files(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| {
                let link = std::fs::read_link(e.ok()?.path()).ok()?;
                Some(link.to_string_lossy().into_owned())
            })
            .collect()
        })
        .unwrap_or_default()
}

/// The command name of `pid` (`/proc/<pid>/comm`, e.g. `redis-server`).
pub(super) fn command_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// The arguments `pid` was started with (`/proc/<pid>/cmdline`).
pub(super) fn command_line(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis, utime 7, stime 5.
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 3 0 9 1 1";
        assert_eq!(stat_cpu_ticks(stat), Some(12));
        assert_eq!(stat_cpu_ticks("4242 (dq) S 1"), None);
        // This process has a stat line that parses.
        assert!(cpu_ticks(std::process::id()).is_ok());
    }

    #[test]
    fn listen_inodes_pick_the_listening_socket_of_the_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            \x20  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0 100 0 0 10 0\n\
            \x20  1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0 20 4 30 10 -1\n\
            \x20  2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 333 1 0 100 0 0 10 0\n";
        assert_eq!(listen_inodes(table, 8080), vec![111]);
        assert_eq!(listen_inodes(table, 8081), vec![333]);
        assert!(listen_inodes(table, 9999).is_empty());
    }

    #[test]
    fn the_listener_of_a_port_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listener_of(port), Some(std::process::id()));
        drop(l);
        assert_eq!(listener_of(port), None);
    }
}
