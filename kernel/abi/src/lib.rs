//! kestrel's guest-visible ABI, shared by the hypervisor, the test guests and the tools.
#![no_std]
