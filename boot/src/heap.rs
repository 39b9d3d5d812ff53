//! The hypervisor heap: a fixed region in the image's .bss, handed to
//! `linked_list_allocator` before any allocation. Its lock is kestrel's
//! (`kernel::base::lock::Mutex`), which waits as every kestrel lock does.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

use kernel::base::lock::Mutex;
use linked_list_allocator::Heap;

/// Heap size: page tables, per-CPU data and VM bookkeeping live here.
pub const HEAP_SIZE: usize = 16 << 20;

#[repr(C, align(4096))]
struct HeapArea([u8; HEAP_SIZE]);

static mut HEAP_AREA: HeapArea = HeapArea([0; HEAP_SIZE]);

/// `linked_list_allocator`'s first-fit heap behind kestrel's lock.
struct LockedHeap(Mutex<Heap>);

impl LockedHeap {
    fn lock(&self) -> kernel::base::lock::MutexGuard<'_, Heap> {
        self.0.lock()
    }
}

// SAFETY: every allocation and free goes through the heap's lock, and the
// heap hands out only blocks of its region that are not in use, aligned
// as `layout` asks (a failure is a null pointer, as the trait wants).
unsafe impl GlobalAlloc for LockedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.lock()
            .allocate_first_fit(layout)
            .map_or(core::ptr::null_mut(), |a| a.as_ptr())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: the caller gives back a block this allocator handed
            // out with the same layout (`GlobalAlloc::dealloc`'s contract).
            unsafe { self.lock().deallocate(p, layout) }
        }
    }
}

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap(Mutex::new(Heap::empty()));

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
