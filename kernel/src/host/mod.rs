//! The machine kestrel runs on, as its firmware describes it: the board
//! description, the boot command line, device trees, ACPI tables, the UEFI
//! memory map and the memory kestrel keeps for itself.

pub mod acpi;
pub mod board;
pub mod cmdline;
pub mod dtb;
pub mod efiboot;
pub mod reserve;
