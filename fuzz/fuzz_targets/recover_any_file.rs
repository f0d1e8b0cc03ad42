#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    dsh_fuzz_targets::recover_any_file(data);
});
