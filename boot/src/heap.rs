//! The hypervisor heap: a fixed region in the image's .bss, handed to
//! `linked_list_allocator` before any allocation.

use linked_list_allocator::LockedHeap;

/// Heap size: page tables, per-CPU data and VM bookkeeping live here.
pub const HEAP_SIZE: usize = 16 << 20;

#[repr(C, align(4096))]
struct HeapArea([u8; HEAP_SIZE]);

static mut HEAP_AREA: HeapArea = HeapArea([0; HEAP_SIZE]);

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap::empty();

/// Gives the heap its memory. Call once, on the boot CPU, before anything allocates.
pub fn init() {
    static DONE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, core::sync::atomic::Ordering::AcqRel) {
        return;
    }
    // SAFETY: HEAP_AREA is used only here, and the swap above makes this run
    // once, so the allocator receives exclusive ownership of the region.
    unsafe {
        let start = core::ptr::addr_of_mut!(HEAP_AREA) as *mut u8;
        ALLOCATOR.lock().init(start, HEAP_SIZE);
    }
    kernel::mem::heap::set_heap_usage(usage);
    // Early one-time init, like the heap: make the embedded VM package known.
    crate::package::register();
}

/// Bytes of heap in use and free, for the boot log (and the log line of
/// each VM restart, through `kernel::mem::heap::heap_usage`).
pub fn usage() -> (usize, usize) {
    let heap = ALLOCATOR.lock();
    (heap.used(), heap.free())
}
