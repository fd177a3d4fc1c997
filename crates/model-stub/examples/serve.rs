//! Runs the stub model server until killed: `cargo run -p korvus-model-stub
//! --example serve -- [script|error|silent]`; prints its base URL.

use korvus_model_stub::{Mode, Script, StubServer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mode = match std::env::args().nth(1).as_deref() {
        Some("error") => Mode::ServerError,
        Some("silent") => Mode::Silent,
        _ => Mode::Script,
    };
    let stub = StubServer::start(Script {
        mode,
        ..Script::default()
    })
    .await?;
    println!("{}", stub.base_url());
    std::future::pending::<()>().await;
    Ok(())
}
