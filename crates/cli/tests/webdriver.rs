//! A small W3C WebDriver client for the browser test: Debian's chromedriver
//! driving headless Chromium, spoken to over HTTP/1.1 on loopback with a
//! plain `TcpStream` (a dozen commands do not need a client library).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Where the browser is, or why there is none.
pub(crate) enum Browser {
    Found { driver: PathBuf, chromium: PathBuf },
    Missing(String),
}

/// Finds chromedriver and Chromium: the paths `cargo xtask test` exports,
/// else Debian's. Under `cargo xtask test` a browser xtask could not
/// install is reported by it (`KORVUS_BROWSER_UNAVAILABLE`).
pub(crate) fn find() -> Browser {
    if let Ok(why) = std::env::var("KORVUS_BROWSER_UNAVAILABLE") {
        return Browser::Missing(why);
    }
    let var = |k: &str, d: &str| PathBuf::from(std::env::var(k).unwrap_or_else(|_| d.into()));
    let driver = var("KORVUS_CHROMEDRIVER", "/usr/bin/chromedriver");
    let chromium = var("KORVUS_CHROMIUM", "/usr/bin/chromium");
    if driver.is_file() && chromium.is_file() {
        Browser::Found { driver, chromium }
    } else {
        Browser::Missing(format!(
            "{} or {} not found (`cargo xtask test` installs Debian's chromium and chromium-driver)",
            driver.display(),
            chromium.display()
        ))
    }
}

/// A chromedriver process and one browser session in it; both end on drop.
pub(crate) struct Driver {
    child: Child,
    port: u16,
    session: String,
}

impl Driver {
    pub(crate) fn start(driver: &Path, chromium: &Path, downloads: &Path) -> Self {
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut d = Self {
            child,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while d.http("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run",
                         "--disable-background-networking", "--window-size=1200,900"],
                "prefs": {
                    "download.default_directory": downloads,
                    "download.prompt_for_download": false,
                },
            },
        }}});
        let created = d
            .http("POST", "/session", Some(caps))
            .expect("a browser session");
        d.session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session in {created}"))
            .to_owned();
        d
    }

    /// One command of the session, e.g. `("POST", "url", {...})`.
    pub(crate) fn cmd(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}/{path}", self.session);
        let answer = self
            .http(method, &path, (!body.is_null()).then_some(body))
            .unwrap_or_else(|e| panic!("webdriver {path}: {e}"));
        if let Some(err) = answer["value"].get("error") {
            panic!("webdriver {path}: {err}: {}", answer["value"]["message"]);
        }
        answer["value"].clone()
    }

    pub(crate) fn goto(&self, url: &str) {
        self.cmd("POST", "url", json!({ "url": url }));
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub(crate) fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            json!({"script": script, "args": []}),
        )
    }

    /// Runs `script` (a function body that calls its last argument with
    /// the result) in the page and returns what it passed.
    pub(crate) fn js_async(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/async",
            json!({"script": script, "args": []}),
        )
    }

    /// Emulates a viewport of `width` × `height` CSS pixels (a phone's
    /// when `mobile`), through Chromium's DevTools protocol: a window
    /// cannot be made narrower than the browser's minimum.
    pub(crate) fn viewport(&self, width: u32, height: u32, mobile: bool) {
        self.cmd(
            "POST",
            "goog/cdp/execute",
            json!({"cmd": "Emulation.setDeviceMetricsOverride", "params": {
                "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile,
            }}),
        );
        let inner = self.js("return [window.innerWidth, window.innerHeight]");
        assert_eq!(inner, json!([width, height]), "the emulated viewport");
    }

    /// A PNG of the viewport, written to `path`.
    pub(crate) fn screenshot(&self, path: &Path) {
        use base64::Engine as _;
        let png = self.cmd("GET", "screenshot", Value::Null);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a base64 screenshot"))
            .expect("base64");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// Presses Tab once, as a keyboard user would.
    pub(crate) fn tab(&self) {
        self.cmd(
            "POST",
            "actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": "\u{E004}"},
                {"type": "keyUp", "value": "\u{E004}"},
            ]}]}),
        );
    }

    fn element(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "element",
            json!({"using": "css selector", "value": css}),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_owned()
    }

    pub(crate) fn click(&self, css: &str) {
        let id = self.element(css);
        self.cmd("POST", &format!("element/{id}/click"), json!({}));
    }

    pub(crate) fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.cmd(
            "POST",
            &format!("element/{id}/value"),
            json!({ "text": text }),
        );
    }

    /// Polls `script` until it returns something truthy; returns that.
    pub(crate) fn wait_for(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.js(script);
            if !(v.is_null() || v == json!(false) || v == json!(0) || v == json!("")) {
                return v;
            }
            if Instant::now() > deadline {
                let page = self.js("return document.body ? document.body.innerText : ''");
                panic!("timed out waiting for {what}; the page says:\n{page}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn http(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open whatever we ask, so the
        // body is read by its length, not to the end of the stream.
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let (head, body_start) = loop {
            let n = read_some(&mut stream, &mut buf)?;
            if n == 0 {
                return Err("connection closed before the header ended".into());
            }
            raw.extend_from_slice(&buf[..n]);
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break (
                    String::from_utf8_lossy(&raw[..at]).to_ascii_lowercase(),
                    at + 4,
                );
            }
        };
        let length = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            (name.trim() == "content-length").then(|| value.trim().parse::<usize>().ok())?
        });
        let body = match length {
            Some(len) => {
                while raw.len() < body_start + len {
                    let n = read_some(&mut stream, &mut buf)?;
                    if n == 0 {
                        break;
                    }
                    raw.extend_from_slice(&buf[..n]);
                }
                String::from_utf8_lossy(&raw[body_start..]).into_owned()
            }
            None => {
                stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
                dechunk(&String::from_utf8_lossy(&raw[body_start..]))
            }
        };
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = self.http("DELETE", &path, None);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One `read`, retried when a signal interrupts it: other tests of this
/// process signal their children, and the test process gets `SIGCHLD`s.
fn read_some(stream: &mut TcpStream, buf: &mut [u8]) -> Result<usize, String> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other.map_err(|e| e.to_string()),
        }
    }
}
