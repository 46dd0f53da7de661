set terminal pngcairo size 1000,560 font "sans,10" noenhanced
set output "/work/main/bench/results/run-all-20261122-d/memory/rss.png"
set title "VmRSS of the s3oramfs daemon and the servers during the fio run"
set xlabel "minutes since the mount"
set ylabel "VmRSS (MiB)"
set grid
set key outside right top
set yrange [0:*]
plot "/work/main/bench/results/run-all-20261122-d/memory/rss-plot.dat" index 0 using 1:2 with lines lw 2 title "fused", \
     "/work/main/bench/results/run-all-20261122-d/memory/rss-plot.dat" index 1 using 1:2 with lines lw 2 title "server-0", \
     "/work/main/bench/results/run-all-20261122-d/memory/rss-plot.dat" index 2 using 1:2 with lines lw 2 title "server-1", \
     "/work/main/bench/results/run-all-20261122-d/memory/rss-plot.dat" index 3 using 1:2 with lines lw 2 title "server-2", \
     16.0 with lines dt 2 lc rgb 'black' title 'daemon cache_size'
