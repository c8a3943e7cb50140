"""What is made from a series: patched wheels (wheel, build), the stripped kernel wheel (strip), prebuilt
FlashInfer modules (aot, aot_worker, fatbin), the dependency set (deps), a PEP 503 index (index), the install
into an environment (install), and the offline bundle (bundle, bundle_installer)."""
