//! kestrel's firmware image: the entry code of each architecture, the heap
//! and the panic handler. Everything else lives in the `kernel` crate.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod heap;

#[cfg(target_os = "none")]
mod package;

#[cfg(target_os = "none")]
mod efi;

#[cfg(all(target_os = "none", target_arch = "aarch64"))]
mod aarch64;

#[cfg(all(target_os = "none", target_arch = "loongarch64"))]
mod loongarch64;

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    kernel::base::fatal::fatal(format_args!("panic: {info}"))
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("kestrel-boot is firmware: build it with `make image`");
}
