{#- Per product: units sold and orders (exact, one copy per event_id), and the approximate
    distinct buyers (uniqCombined). -#}

with

orders as (

    select * from {{ ref('stg_toplist__orders') }}

),

buyers as (

    select product_id, uniqCombinedMerge(buyers) as distinct_buyers
    from {{ ref('stg_toplist__sale_buyers') }}
    group by product_id

),

sold as (

    select product_id, sum(toInt128(units)) as units, count() as orders
    from orders
    group by product_id

)

select
    sold.product_id as product_id,
    sold.units as units,
    sold.orders as orders,
    buyers.distinct_buyers as distinct_buyers
from sold
left join buyers on sold.product_id = buyers.product_id
