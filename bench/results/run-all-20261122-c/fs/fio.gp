set terminal pngcairo size 1800,560 font "sans,10" noenhanced
set output "/work/main/bench/results/run-all-20261122-c/fs/fio.png"
set datafile missing "-"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set format y '%g'
set grid ytics mytics
set key outside below center horizontal Left reverse samplen 2 width 1 maxrows 3
set xtics nomirror
set label 1 "fio, psync, one job at a time (bench/fio-run)" at screen 0.01,0.985 font ",8"
set multiplot layout 1,2
set title "bs=1M: throughput"
set ylabel "MB/s (log scale)"
set yrange [0.1:100000]
set xrange [-0.6:2.6]
plot '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::0::2 using 2:xtic(1) title "passthrough direct=1" lc 1, \
     '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::0::2 using 3:xtic(1) title "passthrough direct=0" lc 2, \
     '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::0::2 using 4:xtic(1) title "s3oramfs direct=1" lc 3, \
     '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::0::2 using 5:xtic(1) title "s3oramfs direct=0" lc 4, \
     0.231219 with lines dt 2 lw 2 lc rgb "black" title "raw ORAM 4096 B blocks (MB/s)"
set title "bs=4k: operations/s (smallfiles: files/s)"
set ylabel "IOPS (log scale)"
set yrange [10:100000]
set xrange [-0.6:2.6]
plot '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::3::5 using 2:xtic(1) title "passthrough direct=1" lc 1, \
     '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::3::5 using 3:xtic(1) title "passthrough direct=0" lc 2, \
     '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::3::5 using 4:xtic(1) title "s3oramfs direct=1" lc 3, \
     '/work/main/bench/results/run-all-20261122-c/fs/fio-plot.dat' every ::3::5 using 5:xtic(1) title "s3oramfs direct=0" lc 4, \
     56.45 with lines dt 2 lw 2 lc rgb "black" title "raw ORAM (accesses/s)"
unset multiplot
