//! Installing without Rust: the Debian package and the release tarball,
//! made by the scripts a release uses (`scripts/package-deb.sh`,
//! `scripts/package-tarball.sh`) from the `dq` this test run built
//! (`DQ_PACKAGE_PROFILE=dev`, `DQ_PACKAGE_NO_BUILD=1`: no second build).
//!
//! The package is installed on this machine with `dpkg -i` (as root; when
//! not root the test says so and stops), checked (binary, unit, conffile,
//! the `dq` system user, `/var/lib/dq`, nothing enabled), its unit's
//! `ExecStart` is run as the unit's user with the unit's environment (only
//! the listen address moved to a free port) until `/readyz` answers, and
//! the package is purged at the end, also when the test fails, leaving the
//! machine as it was. This machine has no running systemd: the unit is run
//! the way it says, not by systemd (`systemd-analyze verify` checks it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cargo target directory this test's `dq` was built in.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_dq"))
        .ancestors()
        .nth(2)
        .expect("target/<profile>/dq")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a packaging script on the binary already built; its last line of
/// output is the file it wrote.
fn package(script: &str) -> PathBuf {
    let out = run(Command::new(repo().join("scripts").join(script))
        .env("CARGO_TARGET_DIR", target_dir())
        .env("DQ_PACKAGE_PROFILE", "dev")
        .env("DQ_PACKAGE_NO_BUILD", "1")
        .stderr(Stdio::inherit()));
    let text = stdout(&out);
    let last = text.lines().last().unwrap_or("").trim();
    let file = PathBuf::from(last);
    assert!(file.is_file(), "{script} said {text:?}, not a file");
    file
}

/// A file's permission bits, in octal.
fn mode(path: impl AsRef<Path>) -> String {
    let meta = std::fs::metadata(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()));
    format!("{:o}", meta.permissions().mode() & 0o7777)
}

fn is_root() -> bool {
    stdout(&run(Command::new("id").arg("-u"))).trim() == "0"
}

fn user_entry(name: &str) -> Option<String> {
    let out = Command::new("getent")
        .args(["passwd", name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| stdout(&out).trim().to_string())
}

fn package_status() -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "dq"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    stdout(&out)
}

/// Purges the package when dropped (after the `dq` it started, if any), so
/// a test that fails half-way leaves nothing installed.
struct Installed {
    server: Option<Child>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let out = Command::new("dpkg").args(["--purge", "dq"]).output();
        if let Ok(out) = out
            && !out.status.success()
        {
            eprintln!(
                "dpkg --purge dq: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The `[Service]` lines of a unit: (key, value) in order.
fn service_lines(unit: &str) -> Vec<(String, String)> {
    let mut in_service = false;
    let mut lines = Vec::new();
    for line in unit.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service
            && !line.starts_with('#')
            && let Some((k, v)) = line.split_once('=')
        {
            lines.push((k.to_string(), v.to_string()));
        }
    }
    lines
}

/// The one value of `key` in the unit's `[Service]` section.
fn one<'a>(lines: &'a [(String, String)], key: &str) -> &'a str {
    let found: Vec<&str> = lines
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(found.len(), 1, "{key}= in the unit: {found:?}");
    found[0]
}

/// The environment the unit gives its process: `Environment=` lines, then
/// the `EnvironmentFile=`s (which override them; `-` when it may be
/// missing), with `%S` (the state directory root of a system unit) expanded.
fn unit_environment(lines: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| {
        env.retain(|(key, _)| key != k);
        env.push((k.to_string(), v.replace("%S", "/var/lib")));
    };
    for (_, v) in lines.iter().filter(|(k, _)| k == "Environment") {
        let (name, value) = v.split_once('=').expect("Environment=NAME=value");
        set(name, value);
    }
    for (_, v) in lines.iter().filter(|(k, _)| k == "EnvironmentFile") {
        let (optional, path) = match v.strip_prefix('-') {
            Some(p) => (true, p),
            None => (false, v.as_str()),
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("EnvironmentFile {path}: {e}"),
        };
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, value) = line.split_once('=').expect("NAME=value");
            set(name, value);
        }
    }
    env
}

/// The status code of `GET path` on 127.0.0.1:port, if it answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

#[test]
fn the_debian_package_installs_runs_its_unit_as_dq_and_purges() {
    if !is_root() {
        eprintln!("skipped: not root, dpkg -i cannot install the package (CI runs as root)");
        return;
    }
    // One package test at a time on this machine (several clones share it).
    let lock = std::fs::File::create(std::env::temp_dir().join("dq-package-test.lock")).unwrap();
    lock.lock().unwrap();
    assert!(
        !package_status().contains("installed") && user_entry("dq").is_none(),
        "a dq package or a dq user is already on this machine ({:?}, {:?}); \
         this test installs and purges its own and touches neither: \
         remove them (dpkg --purge dq) or run it elsewhere",
        package_status(),
        user_entry("dq")
    );
    for dir in ["/var/lib/dq", "/var/lib/dq-backups", "/etc/dq"] {
        assert!(
            !Path::new(dir).exists(),
            "{dir} exists: `dpkg --purge dq` would delete it, so the test stops"
        );
    }

    let deb = package("package-deb.sh");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        deb,
        target_dir()
            .join("debian")
            .join(format!("dq_{version}_amd64.deb")),
    );
    let info = stdout(&run(Command::new("dpkg-deb").arg("--info").arg(&deb)));
    for want in ["Package: dq", &format!("Version: {version}"), "passwd"] {
        assert!(info.contains(want), "dpkg-deb --info: {want}:\n{info}");
    }

    let mut installed = Installed { server: None };
    run(Command::new("dpkg").arg("-i").arg(&deb));
    assert!(package_status().contains("install ok installed"));
    // Installing again (as an upgrade does) finds its user and directories.
    run(Command::new("dpkg").arg("-i").arg(&deb));

    // The files.
    let bin = Path::new("/usr/bin/dq");
    assert_eq!(mode(bin), "755");
    let said = stdout(&run(Command::new(bin).arg("--version")));
    assert_eq!(said.trim(), format!("dq {version}"));
    let unit_path = "/usr/lib/systemd/system/dq.service";
    let unit = std::fs::read_to_string(unit_path).unwrap();
    let conffiles = stdout(&run(Command::new("dpkg-query").args([
        "-W",
        "-f=${Conffiles}",
        "dq",
    ])));
    assert!(
        conffiles.contains("/etc/dq/dq.env"),
        "conffiles: {conffiles}"
    );
    assert_eq!(mode("/etc/dq/dq.env"), "600", "dq.env may hold tokens");
    assert!(
        Path::new("/usr/share/doc/dq/operations.md").is_file(),
        "the unit's Documentation= file"
    );
    // Not enabled, not started: `systemctl enable --now dq` does that.
    assert!(!Path::new("/etc/systemd/system/multi-user.target.wants/dq.service").exists());

    // The unit is deploy/systemd's, with /usr/bin/dq and the dq user.
    let source = std::fs::read_to_string(repo().join("deploy/systemd/dq.service")).unwrap();
    let ours = service_lines(&unit);
    let theirs: Vec<(String, String)> = service_lines(&source)
        .into_iter()
        .flat_map(|(k, v)| match (k.as_str(), v.as_str()) {
            ("ExecStart", "/usr/local/bin/dq serve") => {
                vec![(k, "/usr/bin/dq serve".to_string())]
            }
            ("DynamicUser", "yes") => vec![
                ("User".to_string(), "dq".to_string()),
                ("Group".to_string(), "dq".to_string()),
            ],
            _ => vec![(k, v)],
        })
        .collect();
    assert_eq!(ours, theirs, "the packaged unit's [Service] section");
    let analyze = "/usr/bin/systemd-analyze";
    if Path::new(analyze).exists() {
        let out = run(Command::new(analyze).args(["verify", unit_path]));
        let said = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");
        let out = Command::new(analyze)
            .args(["security", "--offline=yes", "--threshold=20", unit_path])
            .output()
            .unwrap();
        assert!(out.status.success(), "exposure over 2: {}", stdout(&out));
    } else {
        eprintln!("note: {analyze} is missing, the installed unit is not verified");
    }

    // The dq system user, and its data directory.
    let entry = user_entry("dq").expect("the dq user");
    let fields: Vec<&str> = entry.split(':').collect();
    let uid: u32 = fields[2].parse().unwrap();
    assert!(uid < 1000, "a system user: {entry}");
    assert_eq!(fields[5], "/var/lib/dq", "{entry}");
    assert_eq!(fields[6], "/usr/sbin/nologin", "{entry}");
    for dir in ["/var/lib/dq", "/var/lib/dq-backups"] {
        let meta = std::fs::metadata(dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.uid(), uid, "{dir} owned by dq");
        assert_eq!(mode(dir), "700", "{dir}");
    }

    // The unit's ExecStart, as its user, with its environment and umask;
    // only the listen address is moved (7070 may be taken here).
    let user = one(&ours, "User");
    let group = one(&ours, "Group");
    let umask = one(&ours, "UMask");
    let exec: Vec<&str> = one(&ours, "ExecStart").split_whitespace().collect();
    let port = dq_testkit::free_port();
    let mut env = unit_environment(&ours);
    let data_dir = env
        .iter()
        .find(|(k, _)| k == "DQ_DATA_DIR")
        .map(|(_, v)| v.clone())
        .expect("the unit sets DQ_DATA_DIR");
    assert_eq!(data_dir, "/var/lib/dq");
    let listen = env
        .iter_mut()
        .find(|(k, _)| k == "DQ_LISTEN")
        .expect("the unit sets DQ_LISTEN");
    listen.1 = format!("127.0.0.1:{port}");
    let child = Command::new("sh")
        .args([
            "-c",
            r#"umask "$1" && u=$2 g=$3 && shift 3 && exec setpriv --reuid="$u" --regid="$g" --init-groups -- "$@""#,
            "sh",
            umask,
            user,
            group,
        ])
        .args(&exec)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let server = installed.server.insert(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_status(port, "/readyz") != Some(200) {
        assert!(
            server.try_wait().unwrap().is_none(),
            "the unit's ExecStart exited before /readyz answered"
        );
        assert!(
            Instant::now() < deadline,
            "/readyz did not answer 200 in 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = server.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let real_uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    assert_eq!(real_uid, uid.to_string(), "dq serve runs as dq");
    let store = Path::new(&data_dir).join("dq.sqlite3");
    let meta = std::fs::metadata(&store).unwrap_or_else(|e| panic!("{}: {e}", store.display()));
    assert_eq!(meta.uid(), uid, "the store is dq's");
    assert_eq!(mode(&store), "600", "UMask=0077");

    // A command on the data directory as the service's user, while it
    // runs (docs/operations.md, "systemd").
    run(Command::new("runuser").args([
        "-u",
        user,
        "--",
        "/usr/bin/dq",
        "backup",
        "--data-dir",
        &data_dir,
        "/var/lib/dq-backups/dq-1.db",
    ]));
    let backup = std::fs::metadata("/var/lib/dq-backups/dq-1.db").unwrap();
    assert_eq!(backup.uid(), uid, "the backup is dq's");

    // Stopped as systemd stops it: SIGTERM, then exit 0.
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "dq serve did not stop on SIGTERM in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "dq serve exited with {exit}");
    installed.server = None;

    // Removed: the service's files go; the data, the settings and the
    // user stay.
    run(Command::new("dpkg").args(["-r", "dq"]));
    assert!(!bin.exists() && !Path::new(unit_path).exists());
    assert!(store.is_file() && Path::new("/etc/dq/dq.env").is_file());
    assert!(user_entry("dq").is_some());

    // Purged: nothing of it is left.
    drop(installed);
    assert!(
        !package_status().contains("installed"),
        "{}",
        package_status()
    );
    assert!(user_entry("dq").is_none(), "the dq user is gone");
    let out = Command::new("getent")
        .args(["group", "dq"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the dq group is gone");
    for path in [
        "/usr/bin/dq",
        unit_path,
        "/etc/dq",
        "/var/lib/dq",
        "/var/lib/dq-backups",
        "/usr/share/doc/dq",
    ] {
        assert!(!Path::new(path).exists(), "{path} is left after the purge");
    }
}

#[test]
fn the_tarball_holds_the_binary_the_unit_and_the_docs() {
    let tarball = package("package-tarball.sh");
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("dq-{version}-x86_64-linux");
    assert_eq!(
        tarball,
        target_dir().join("dist").join(format!("{name}.tar.gz"))
    );
    let listing = stdout(&run(Command::new("tar").arg("-tvzf").arg(&tarball)));
    let mut docs = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".md"))
        .collect::<Vec<_>>();
    docs.sort();
    assert!(docs.len() >= 10, "{docs:?}");
    let mut want = vec![
        "bin/dq".to_string(),
        "systemd/dq.service".to_string(),
        "README.md".to_string(),
    ];
    want.extend(docs.iter().map(|d| format!("docs/{d}")));
    for file in want {
        let path = format!("{name}/{file}");
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" {path}")))
            .unwrap_or_else(|| panic!("{path} is not in the tarball:\n{listing}"));
        let mode = if file == "bin/dq" {
            "-rwxr-xr-x"
        } else {
            "-rw-r--r--"
        };
        assert!(line.starts_with(mode), "{line}");
        assert!(line.contains(" 0/0 "), "owned by root: {line}");
    }
    for line in listing.lines() {
        let path = line.rsplit(' ').next().unwrap();
        assert!(
            path.starts_with(&format!("{name}/")),
            "outside {name}/: {line}"
        );
    }

    // What it holds works as it is: the binary runs, the unit is the one of
    // deploy/.
    let dir = tempfile::tempdir().unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir.path()));
    let root = dir.path().join(&name);
    let said = stdout(&run(Command::new(root.join("bin/dq")).arg("--version")));
    assert_eq!(said.trim(), format!("dq {version}"));
    assert_eq!(
        std::fs::read(root.join("systemd/dq.service")).unwrap(),
        std::fs::read(repo().join("deploy/systemd/dq.service")).unwrap()
    );
    let bin = std::fs::metadata(root.join("bin/dq")).unwrap().len();
    let built = std::fs::metadata(env!("CARGO_BIN_EXE_dq")).unwrap().len();
    assert!(
        bin < built,
        "bin/dq is stripped: {bin} bytes, the build {built}"
    );
}
