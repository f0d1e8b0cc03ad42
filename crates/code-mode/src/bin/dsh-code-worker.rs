//! A script worker of code mode and nothing else: `RunCode::with_worker` can name it. It
//! reads one job on stdin, runs the script, reports on stdout, and exits.

fn main() {
    std::process::exit(dsh_code_mode::worker_main());
}
