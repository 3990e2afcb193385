total 8
drwxr-xr-x 2 root root 4096 Nov 26 08:18 .
drwxr-xr-x 3 root root 4096 Nov 26 08:18 ..
-rw-r--r-- 1 root root 164 Nov 26 08:18 /root/out/gemm16/repr.tar.xz
