//! A real nginx (Debian's), as a reverse proxy in front of Sluicegate; stopped on drop.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::{free_port, wait_for_port};
use crate::program::program;

/// A running nginx master (one worker) in its own folder; stopped on drop.
pub struct Nginx {
    child: Child,
    /// The port its `server` listens on (127.0.0.1).
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx with the `server { … }` blocks that `servers(dir, port)` returns, inside
    /// an `http` block that has the temp paths set; `dir/www` exists for static files.
    /// Waits until `port` accepts connections. `None` (the test skips) when nginx is
    /// missing outside CI; under `CI=true` it panics.
    pub fn start(servers: impl FnOnce(&Path, u16) -> String) -> Option<Nginx> {
        let binary = program("nginx")?;
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        // nginx workers may run as another user: let them read the tree.
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for sub in ["www", "tmp"] {
            std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        }
        let port = free_port();
        let conf = d.join("nginx.conf");
        std::fs::write(&conf, main_conf(d, &servers(d, port))).expect("write nginx.conf");
        let child = Command::new(binary)
            .arg("-p")
            .arg(d)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(d.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nginx");
        let nginx = Nginx { child, port, dir };
        wait_for_port(([127, 0, 0, 1], port).into());
        Some(nginx)
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// Its folder (`www/` is the document root the caller's blocks may use).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// nginx's error log, for failure messages.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers; SIGKILL would orphan them.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The main configuration: foreground, one worker, everything inside `dir`.
fn main_conf(dir: &Path, servers: &str) -> String {
    let dir = dir.display();
    format!(
        r#"
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
{servers}
}}
"#
    )
}
