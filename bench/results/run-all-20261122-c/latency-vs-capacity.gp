set terminal pngcairo size 1000,620 font "sans,10" noenhanced
set bmargin 6
set xlabel offset 0,-1.2
set output "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.png"
set datafile missing "-"
set grid
set key top left box opaque
set ytics nomirror
set logscale y
set format y '%g'
set mxtics 1
set title "ORAM access latency vs capacity (s3oram bench, default parameters)"
set logscale x 2
set xrange [4.1943e+07:6.87195e+09]
set xlabel "capacity (log scale); tree height H and bucket size Z under each point"
set ylabel "ms per access (log scale)"
set y2label "tree height H"
set y2tics 1
set y2range [8:18]
plot "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.dat" using 1:5:xtic(sprintf("%s\nH=%d Z=%d", strcol(2), $3, $4)) with linespoints lw 2 pt 7 title 'mean', \
     "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.dat" using 1:6 with linespoints pt 5 title 'p50', \
     "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.dat" using 1:7 with linespoints pt 9 title 'p99', \
     "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.dat" using 1:8 with linespoints pt 11 title 'max', \
     "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.dat" using 1:9 with linespoints lw 2 dt 3 pt 6 lc rgb 'dark-red' title 'mean/(H+1): per tree level', \
     "/work/main/bench/results/run-all-20261122-c/latency-vs-capacity.dat" using 1:3 axes x1y2 with linespoints dt 2 lc rgb 'black' pt 4 title 'H (right axis)'
