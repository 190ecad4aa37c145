//! Link settings libtorch needs and cargo cannot express in Cargo.toml.
//!
//! - an rpath to the libtorch that torch-sys built against, so the binary runs
//!   without LD_LIBRARY_PATH (the venv's `torch/lib`);
//! - `libtorch_cuda` kept although nothing references it by symbol: the
//!   linker's `--as-needed` would drop it, and then `tch::Cuda::is_available()`
//!   is false even on a GPU machine. Only when the libtorch has it (CPU-only
//!   builds do not).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib_dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    if std::path::Path::new(&lib_dir).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
