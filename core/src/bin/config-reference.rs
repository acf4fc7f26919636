//! Writes the configuration reference generated from the typed config:
//! `config-reference docs/configuration.md` (what `make config-reference` runs), or to
//! standard output without a path. See `infergate_core::config::reference`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let page = match infergate_core::config::reference::render() {
        Ok(page) => page,
        Err(e) => {
            eprintln!("config-reference: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(path) = std::env::args().nth(1) else {
        print!("{page}");
        return ExitCode::SUCCESS;
    };
    let unchanged = std::fs::read_to_string(&path).is_ok_and(|old| old == page);
    if unchanged {
        println!("{path} is up to date");
        return ExitCode::SUCCESS;
    }
    match std::fs::write(&path, &page) {
        Ok(()) => {
            println!("wrote {path} ({} lines)", page.lines().count());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("config-reference: cannot write {path}: {e}");
            ExitCode::FAILURE
        }
    }
}
